"""`simmoe bound`: Table 5 of SpecFit on a trace (Proposition 1, Eq. 7, App. A).

Walks the cycles SpecFit runs on the trace (adaptive depth, exact routes),
then computes λ* by Dinkelbach's iteration, Θ of Eq. 5, the Eq. 7 bound and
the other rows of Table 5, plus the largest ratio without the size limit.
The inequalities the paper proves are asserted: a violation exits with 3.
"""

from __future__ import annotations

import json
import sys

from simmoe.errors import SimmoeError
from simmoe.replay.engine import DEFAULT_PROFILE

DEFAULT_SLOTS = 48


def register(sub) -> None:
    p = sub.add_parser(
        "bound",
        help="Table 5 of SpecFit on a trace: lambda*, Theta, the Eq. 7 bound",
        description="Replay SpecFit's cycles on TRACE and evaluate the selection theory of "
        "SpecFit App. A on the pools it drafted (Table 5): lambda* (Dinkelbach), Theta of "
        "Eq. 5, the Eq. 7 bound, S* vs S-hat, F/R at beta and 2 beta, drafted levels, and "
        "the largest ratio without the size limit (parametric minimum cut).",
    )
    p.add_argument("trace", metavar="TRACE", help="trace file")
    p.add_argument("--hardware", metavar="PROFILE", default=None,
                   help="hardware profile (name or path) whose cost coefficients b, beta are "
                   f"used (default {DEFAULT_PROFILE}, or for a trace it cannot serve the physical profile "
                   "of the trace's model, as simmoe replay)")
    p.add_argument("--slots", metavar="N", type=int, default=DEFAULT_SLOTS,
                   help="expert slots per layer: > 0 uses the coefficients fitted with the "
                   f"cache, 0 those fitted without it (default {DEFAULT_SLOTS})")
    p.add_argument("--requests", metavar="N", type=int,
                   help="only the first N requests of the trace (default: all)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=run)


def run(args) -> int:
    log = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    report = bound_report(args.trace, hardware=args.hardware, slots=args.slots,
                          requests=args.requests, log=log)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_table(report)
    return 0


CPU_NOTE = ("experts on the CPU ({placement}): T-hat is Eq. 4 of this regime, b_k the placement's forward over "
            "1 + k tokens and beta one more expert per MoE layer averaged over the layers (a CPU expert's read on "
            "CPU layers, its HBM read on GPU layers), the cost SpecFit selects with here; --slots changes nothing "
            "(one set of coefficients)")
# a static placement: SpecFit selects with the exact cost, so Table 5 is only Eq. 4's approximation of it
STATIC_CPU_NOTE = ("experts on the CPU ({placement}): Table 5 is of Eq. 4's approximation of this regime (b_k the "
                   "placement's forward over 1 + k tokens, beta one more expert per MoE layer averaged over the "
                   "layers), not of the cost SpecFit selects with here; the margins under that exact cost, "
                   "T(S) = b_|S| + sum over the union's experts of max(r, g*n), are in the second table; --slots "
                   "changes nothing (one set of coefficients)")
CPU_EXACT_NOTE = ("under the exact cost, Table 5's rows F/R at beta and 2 beta, nodes at 2 beta and the size-limit "
                  "comparison (App. A.3) have no counterpart: there is no single beta (read times per layer, "
                  "compute-bound experts), and the minimum cut needs R - lambda*T supermodular, which "
                  "compute-bound experts break; Eq. 7 and Lemma 1 need only the two selections' optimality and "
                  "hold as they are (docs/cpu-experts.md)")
AR_ONLY_NOTE = ("AR-only trace: no draft trees, so every cycle verifies the root alone; the table is "
                "degenerate (lambda* = Theta, no selection to compare)")


def bound_report(path: str, *, hardware: str | None = DEFAULT_PROFILE, slots: int = DEFAULT_SLOTS,
                 requests: int | None = None, log=lambda msg: None) -> dict:
    """Everything ``simmoe bound`` prints, as a JSON-able dict (``requests``: the first N only).

    ``hardware`` None: the profile follows the trace (:mod:`simmoe.cli.defaults`).
    """
    from simmoe.hardware.model_check import check_profile_model
    from simmoe.hardware.profile import load_profile
    from simmoe.theory.cycles import specfit_cycles
    from simmoe.theory.table5 import compute_table5
    from simmoe.trace.io import read_trace
    from solvers import InvalidInput

    if slots < 0:
        raise SimmoeError(f"--slots must be >= 0, got {slots}")
    trace = read_trace(path)
    if requests is not None:
        from simmoe.trace.subset import head_requests

        trace = head_requests(trace, requests)
    if hardware is None:
        from simmoe.cli.defaults import profile_for_trace

        hardware, profile = profile_for_trace(trace, say=lambda msg: print(f"simmoe bound: {msg}", file=sys.stderr))
    else:
        profile = load_profile(hardware)
    check_profile_model(trace.geometry, profile, hardware)
    name = profile.name
    cache = slots > 0  # the cache never changes selections, only which coefficients apply
    cost = profile.cost_model(cache)
    K = trace.pool_shape.K
    if len(cost.b) < K + 1:
        raise SimmoeError(f"profile {name!r} has {len(cost.b)} intercepts b_0..b_"
                          f"{len(cost.b) - 1}, but the trace's K = {K} needs b_0..b_{K}")
    try:
        log(f"walking SpecFit's cycles over {len(trace.requests)} requests ...")
        cycles = specfit_cycles(trace, cost, K)
        if not cycles:
            raise SimmoeError(f"{path}: the trace has no output positions")
        log(f"{len(cycles):,} cycles; Dinkelbach, Eq. 7 and the minimum cuts ...")
        table = compute_table5(cycles, K, cost, synthetic=trace.is_synthetic)
    except InvalidInput as exc:
        raise SimmoeError(f"{path}: {exc}") from None
    return {
        "trace": str(path),
        "synthetic": trace.is_synthetic,
        "provenance": trace.meta.get("provenance", {}).get("kind", "unknown"),
        "hardware": name,
        "slots": slots,
        "cache": cache,
        "K": K,
        "b": list(cost.b),
        "beta": cost.beta,
        "cycle_source": "cursor walk over the trace (specfit, adaptive depth, exact routes)",
        "units": "lambda_star, theta, mean_rho_*: tokens per ms of predicted time",
        "table5": table.to_dict(),
        **({"note": AR_ONLY_NOTE} if trace.num_nodes == 0 else {}),
        **_cpu_note(profile),
        **_cpu_exact(trace, profile, cost, K, path, log),
    }


def _cpu_note(profile) -> dict:
    """With experts on the CPU, which cost Table 5 is of (docs/cpu-experts.md)."""
    from simmoe.hardware.cpu_forward import CpuForward

    phys = getattr(profile, "physical", None)
    if not isinstance(phys, CpuForward):
        return {}
    note = CPU_NOTE if phys.placement.uses_cache else STATIC_CPU_NOTE
    return {"cost_note": note.format(placement=phys.placement.text)}


def _cpu_exact(trace, profile, cost, K: int, path, log) -> dict:
    """A static CPU placement: Proposition 1's margins under the exact cost SpecFit selects with, over the
    cycles it runs with that cost (:mod:`simmoe.theory.cpu_bound`)."""
    from simmoe.replay.selection_cpu import priced_cost, select_cpu, static_cpu_forward

    if static_cpu_forward(profile) is None:
        return {}
    from simmoe.theory.cpu_bound import cpu_margins, walk_cpu_cycles
    from solvers import InvalidInput

    priced = priced_cost(profile, cost)
    log("walking SpecFit's cycles under the exact CPU-expert cost; Dinkelbach with that cost ...")
    try:
        cycles = walk_cpu_cycles(trace, K, lambda view, k: select_cpu(view, k, priced, adaptive=True))
        margins = cpu_margins(cycles, K, priced.cpu)
    except InvalidInput as exc:
        raise SimmoeError(f"{path}: {exc}") from None
    return {"cpu_exact": margins.to_dict(), "cpu_exact_note": CPU_EXACT_NOTE}


def _fmt(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.2f}"


def print_table(report: dict) -> None:

    from simmoe.cli.console import make_console
    from simmoe.theory.table5 import ROWS

    label = "synthetic trace" if report["synthetic"] else f"{report['provenance']} trace"
    cache = f"{report['slots']} slots, with cache" if report["cache"] else "0 slots, without cache"
    eq4 = ", Eq. 4's approximation of the CPU-expert cost" if report.get("cpu_exact") else ""
    table = _quantities(f"SpecFit Table 5 on {report['trace']} ({label}){eq4}",
                        f"{report['hardware']}, {cache}: beta = {report['beta']:.6g} ms, K = {report['K']}",
                        ROWS, report["table5"])
    console = make_console(width=None, highlight=True)
    console.print(table)
    if report.get("cpu_exact"):
        console.print(_exact_table(report, label))
    for key in ("note", "cost_note", "cpu_exact_note"):
        if report.get(key):
            console.print(f"Note: {report[key]}.")


def _exact_table(report: dict, label: str):
    from simmoe.theory.cpu_bound import ROWS

    return _quantities(f"Proposition 1 under the exact CPU-expert cost on {report['trace']} ({label})",
                       f"{report['hardware']}: T(S) = b_|S| + sum of max(r, g*n) over the union's experts, "
                       f"K = {report['K']}", ROWS, report["cpu_exact"])


def _quantities(title: str, caption: str, rows, values: dict):
    """A two-column table of ``rows`` ((key, text, scale) each) read from ``values``."""
    from rich.table import Table

    table = Table(title=title, caption=caption)
    table.add_column("Quantity")
    table.add_column("Value", justify="right")
    for key, text, scale in rows:
        value = values[key] * scale if scale != 1 else values[key]
        # the error bound is near 0 once converged: significant digits, not two decimals
        table.add_row(text, f"{value:.3g}" if key == "dinkelbach_error_bound" else _fmt(value))
    return table
