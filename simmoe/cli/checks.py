"""Checks of command-line values shared by several commands, run before any work.

Each raises :class:`simmoe.errors.SimmoeError` (one line, exit 2) naming the
flag; output paths go through :func:`simmoe.atomicio.check_outputs`.
"""

from __future__ import annotations

from simmoe.errors import SimmoeError


def check_seed(value, flag: str = "--seed") -> int:
    """A seed is a non-negative integer (numpy's generators refuse others, deep inside a worker)."""
    if isinstance(value, bool) or int(value) != value or value < 0:
        raise SimmoeError(f"{flag} {value}: must be a non-negative integer")
    return int(value)


def check_replay_args(args) -> None:
    """``simmoe replay``: the seed and every output (--json, --csv, --cycles, --timeline) before any work."""
    from simmoe.atomicio import check_outputs

    check_seed(args.seed)
    check_outputs((("--json", args.json), ("--csv", args.csv), ("--cycles", args.cycles),
                   ("--timeline", getattr(args, "timeline", None))),
                  stdout=("--json", "--csv"), inputs=(args.trace,))


def cache_budget(experts, mib, trace, *, cache: str, resident: bool) -> int | None:
    """``--cache-experts E`` or ``--cache-mib M`` as a number of experts across layers (None: neither given).

    M MiB hold floor(M MiB / the trace's bytes per expert) experts, computed
    exactly (a huge M does not overflow a float), and at most every expert of
    the trace (a larger budget is the same replay).  A budget that cannot hold
    one layer's top-k experts is refused naming the flag typed; ``E`` is checked
    by the replay's setting (``--cache-experts``).
    """
    import math
    from fractions import Fraction

    if experts is not None and mib is not None:
        raise SimmoeError("--cache-experts and --cache-mib both give the cache budget: give one")
    if mib is None:
        return experts
    if not (math.isfinite(float(mib)) and float(mib) >= 0):
        raise SimmoeError(f"--cache-mib {mib:g}: the cache budget must be a non-negative number of MiB")
    g = trace.geometry
    size = int(getattr(g, "expert_bytes", 0) or 0)
    if size <= 0:
        raise SimmoeError(f"--cache-mib {mib:g}: the trace does not record the bytes of one expert "
                          "(geometry.expert_bytes); give the budget in experts with --cache-experts")
    n = min(math.floor(Fraction(mib) * 2**20 / size), int(g.num_layers) * int(g.num_experts))
    k = int(g.top_k)
    if n < k and cache != "none" and not resident:     # a forward needs one layer's top-k at once
        raise SimmoeError(f"--cache-mib {mib:g}: holds {n} expert{'s' if n != 1 else ''} of "
                          f"{size / 2**20:.4g} MiB, and a cache budget must hold at least one layer's top-{k} experts "
                          f"(a token routes to {k} per layer): give at least {k * size / 2**20:.4g} MiB, "
                          "or leave the flag out and give --slots 0 for no cache")
    return n
