"""`simmoe hardness`: Proposition 2 on instances: CLIQUE reductions decided two ways.

Each instance is a random graph G(n, q) turned into a pool by the reduction
of SpecFit App. A.3; the exact selector decides whether some legal subtree
reaches the threshold θ, networkx decides whether the graph has an r-clique,
and the two answers must agree (otherwise exit status 3).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from simmoe.atomicio import write_text_atomic
from simmoe.errors import CheckFailed, SimmoeError

DEFAULT_MAX_SUBTREES = 10**9


def register(sub) -> None:
    p = sub.add_parser(
        "hardness",
        help="CLIQUE-reduction instances decided by the exact selector and networkx",
        description="Generate CLIQUE-reduction instances (SpecFit Proposition 2, App. A.3) "
        "from random graphs G(n, q), decide each with the exact selector (does some legal "
        "subtree reach theta?) and with networkx (is there an r-clique?), and check that "
        "the answers agree. Instances are synthetic.",
    )
    p.add_argument("--vertices", metavar="N", type=int, required=True, help="vertices n")
    p.add_argument("--edge-prob", metavar="Q", type=float, required=True,
                   help="edge probability q of G(n, q)")
    p.add_argument("--r", metavar="R", type=int, required=True, help="clique size r (2 <= r <= n)")
    p.add_argument("--seed", metavar="S", type=int, default=0,
                   help="seed of the first graph; instance i uses S + i (default 0)")
    p.add_argument("--count", metavar="M", type=int, default=1, help="instances (default 1)")
    p.add_argument("--write", metavar="DIR", default=None,
                   help="save every instance as a pool file (JSON) in DIR")
    p.add_argument("--max-subtrees", metavar="X", type=int, default=DEFAULT_MAX_SUBTREES,
                   help="refuse instances whose legal family A_K holds more subtrees than X "
                   f"(the exact search may have to visit them all; default {DEFAULT_MAX_SUBTREES:,})")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def _validate(args) -> None:
    if args.vertices < 2:
        raise SimmoeError(f"--vertices must be at least 2, got {args.vertices}")
    if not 0.0 <= args.edge_prob <= 1.0:
        raise SimmoeError(f"--edge-prob must lie in [0, 1], got {args.edge_prob}")
    if not 2 <= args.r <= args.vertices:
        raise SimmoeError(f"--r must satisfy 2 <= r <= vertices ({args.vertices}), got {args.r}")
    if args.count < 1:
        raise SimmoeError(f"--count must be at least 1, got {args.count}")
    if args.seed < 0:
        raise SimmoeError(f"--seed must be >= 0, got {args.seed}")
    from simmoe.atomicio import check_outputs

    check_outputs([("--write", args.write)], folders=("--write",))


def run(args) -> int:
    from simmoe.theory.hardness import (
        decide,
        instance_record,
        instance_seeds,
        random_graph,
        selected_is_clique,
        subtree_count,
    )

    _validate(args)
    decide(random_graph(3, 1.0, 0), 2)  # warm-up, so the first instance's times are not first-call costs
    cases, records, problems = [], [], []
    for i, seed in enumerate(instance_seeds(args.seed, args.count)):
        graph = random_graph(args.vertices, args.edge_prob, seed)
        k = args.r * (args.r - 1) // 2
        size = subtree_count(graph.number_of_edges(), k)
        if size > args.max_subtrees:
            raise SimmoeError(
                f"instance {i} (seed {seed}) has {graph.number_of_edges()} edges and K = {k}: "
                f"{size:,} legal subtrees, above --max-subtrees {args.max_subtrees:,}; "
                f"lower --vertices, --edge-prob or --r, or raise --max-subtrees")
        case, instance = decide(graph, args.r, index=i, seed=seed)
        cases.append((case, size))
        if args.write is not None:
            records.append(instance_record(case, instance))
        if not case.agree:
            problems.append(f"instance {i} (seed {seed}): selector says "
                            f"{'reaches' if case.reaches else 'does not reach'} theta, networkx "
                            f"says {'a' if case.clique else 'no'} {args.r}-clique")
        elif case.reaches and not selected_is_clique(case, graph):
            problems.append(f"instance {i} (seed {seed}): the selection reaching theta covers "
                            f"vertices {list(case.selected_vertices)}, not an {args.r}-clique")
    written = _write_all(args.write, records, args) if args.write is not None else []
    if args.json:
        json.dump(_as_json(args, cases, written), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_table(args, cases, written)
    if problems:
        raise CheckFailed("; ".join(problems))
    return 0


def _filename(args, seed: int) -> str:
    return f"clique_n{args.vertices}_q{args.edge_prob:g}_r{args.r}_seed{seed}.json"


def _write_all(folder: str, records: list[dict], args) -> list[str]:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for rec in records:
        path = out / _filename(args, rec["graph"]["seed"])
        write_json_atomic(path, rec)
        paths.append(str(path))
    return paths


def write_json_atomic(path: Path, obj) -> None:
    """Write JSON to a temp file in the same folder, then rename it into place."""
    write_text_atomic(path, json.dumps(obj, indent=1) + "\n")


def _as_json(args, cases, written) -> dict:
    return {
        "synthetic": True,
        "vertices": args.vertices, "edge_prob": args.edge_prob, "r": args.r,
        "seed": args.seed, "count": args.count,
        "instances": [{
            "index": c.index, "seed": c.seed, "edges": c.edges, "K": c.K,
            "legal_subtrees": size, "theta": c.theta, "best_ratio": c.best_ratio,
            "reaches_theta": c.reaches, "has_clique": c.clique, "agree": c.agree,
            "selected_vertices": list(c.selected_vertices),
            "select_ms": 1e3 * c.select_s, "clique_ms": 1e3 * c.clique_s,
        } for c, size in cases],
        "all_agree": all(c.agree for c, _ in cases),
        "written": written,
    }


def _print_table(args, cases, written) -> None:
    from rich.table import Table

    from simmoe.cli.console import make_console

    table = Table(title=f"Proposition 2 on synthetic CLIQUE instances: "
                        f"G({args.vertices}, {args.edge_prob:g}), r = {args.r}")
    # short headers: the table must fit 80 columns when piped
    for name in ("#", "seed", "m", "K", "|A_K|", "≥ θ", "clique", "sel ms", "nx ms", "agree"):
        table.add_column(name, justify="right")
    for c, size in cases:
        table.add_row(str(c.index), str(c.seed), str(c.edges), str(c.K),
                      f"{size:,}" if size < 10**7 else f"{size:.2e}",
                      "yes" if c.reaches else "no", "yes" if c.clique else "no",
                      f"{1e3 * c.select_s:.2f}", f"{1e3 * c.clique_s:.2f}",
                      "yes" if c.agree else "[red]NO[/red]")
    console = make_console(width=None, highlight=True)
    console.print(table)
    console.print("m: edges = pool nodes; ≥ θ: the exact selector's answer; clique: networkx's")
    for path in written:
        console.print(f"wrote {path}")
