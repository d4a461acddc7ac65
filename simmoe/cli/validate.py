"""`simmoe validate`: replay a recorded trace as a live run ran it, and compare cycle by cycle."""

from __future__ import annotations

import json
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser(
        "validate", help="Compare a replay of a recorded trace with a live run (hwprobe live)",
        description="Replays TRACE (hwprobe record, same model, prompts and max-new-tokens) with the live run's "
        "selector, slots and route information, on a hardware profile measured on the same machine, and "
        "compares per cycle and in total: accepted tokens (must match exactly: exit 3 otherwise), per-cycle "
        "time error (median, p90), decode TPS error, copies-per-token error.")
    p.add_argument("--trace", required=True, help="trace recorded by hwprobe record")
    p.add_argument("--live", required=True, action="append", metavar="LIVE",
                   help="live-run file (hwprobe live); repeat for several runs of the same trace.  Passes of one "
                   "run made separately join with commas (A,B,C): each time becomes its minimum over them")
    p.add_argument("--fit", action="append", metavar="LIVE", default=None,
                   help="live runs (same machine, any prompts) whose cycles fit the event model's timing; "
                   "repeatable, passes joined with commas as for --live; their mean selector time per selector "
                   "replaces the replay's own.  Default: the --live runs themselves (in-sample, said so; the "
                   "replay measures selector time)")
    p.add_argument("--hardware", help="use this profile's timing instead of fitting one (name or .toml)")
    p.add_argument("--save-profile", metavar="TOML", help="write the fitted profile here")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON ('-' for stdout)")
    p.add_argument("--cycles", metavar="FILE.csv", help="write the aligned per-cycle comparison as CSV")
    p.set_defaults(func=run)


def _write_atomic(path: Path, text: str) -> None:
    from simmoe.atomicio import write_text_atomic

    write_text_atomic(path, text)


def run(args) -> int:
    from simmoe.atomicio import check_outputs
    from simmoe.errors import SimmoeError
    from simmoe.hardware.model_check import check_profile_model
    from simmoe.hardware.profile import load_profile
    from simmoe.trace.io import read_trace
    from simmoe.validation.live import (
        assert_exact,
        compare,
        fit_timing,
        format_table,
        profile_from_dict,
        read_live_passes,
        selector_time,
    )

    lives = [p for group in args.live + (args.fit or []) for p in group.split(",")]
    check_outputs((("--json", args.json), ("--cycles", args.cycles), ("--save-profile", args.save_profile)),
                  stdout=("--json",), inputs=(args.trace, *lives))
    for group in args.live + (args.fit or []):
        if any(not p.strip() for p in group.split(",")):
            raise SimmoeError(f"--live/--fit {group!r}: an empty file name between commas")
    if Path(args.trace).is_dir():
        raise SimmoeError(f"--trace {args.trace}: is a folder, not a trace file")
    if not Path(args.trace).is_file():
        raise SimmoeError(f"no such trace file: {args.trace}")
    trace = read_trace(args.trace)
    given = load_profile(args.hardware) if args.hardware else None
    if given is not None:   # before the live runs are read: a profile of another model is refused first
        check_profile_model(trace.geometry, given, args.hardware)
    lives = [read_live_passes(p.split(",")) for p in args.live]
    fits = [read_live_passes(p.split(",")) for p in args.fit] if args.fit else lives
    in_sample = not args.fit
    if given is not None:
        timing = given
        origin = f"profile {args.hardware}"
    else:
        timing = fit_timing(fits, name="fitted-live")
        origin = ("fitted to the validated runs' own cycles (in-sample)" if in_sample
                  else f"fitted to {len(fits)} other live run(s): {', '.join(args.fit)}")
    results = []
    for live in lives:
        # the selector's cost models (b_k, beta, C(k)) are the live run's, so selections are identical
        sel = live.meta.get("selection_profile")
        prof = timing
        if sel:
            base = profile_from_dict(sel)
            prof = timing.replace(cost_b_cache=base.cost_b_cache, cost_beta_cache=base.cost_beta_cache,
                                  cost_b_no_cache=base.cost_b_no_cache, cost_beta_no_cache=base.cost_beta_no_cache,
                                  evict_cost=base.evict_cost)
        sel_ms = selector_time(fits, live.meta["selector"]) if args.fit else None
        results.append(compare(trace, live, prof, selector_ms=sel_ms))
    prov = trace.meta.get("provenance", {})
    print(f"trace {args.trace}: {prov.get('model')} ({prov.get('weights')}), drafter {prov.get('drafter')}, "
          f"{len(trace.requests)} requests, {int(trace.requests.output_len.sum())} positions")
    print(f"timing: {origin}")
    print(format_table(results))
    if args.json:
        doc = {"trace": str(args.trace), "timing_origin": origin, "in_sample": in_sample,
               "profile": _profile_json(timing),
               "runs": [{"live": p, **v.row(), "errors": v.errors, "live_summary": v.live,
                         "replay_summary": v.replay} for p, v in zip(args.live, results)]}
        text = json.dumps(doc, indent=1, default=float)
        if args.json == "-":
            print(text)
        else:
            _write_atomic(Path(args.json), text + "\n")
    if args.cycles:
        import pandas as pd

        frame = pd.concat([v.cycles.assign(selector=v.selector, slots=v.slots, live=p)
                           for p, v in zip(args.live, results)], ignore_index=True)
        _write_atomic(Path(args.cycles), frame.to_csv(index=False))
    if args.save_profile:
        from simmoe.hardware.profile import save_profile

        save_profile(timing, args.save_profile, header="event model fitted to live cycles by simmoe validate")
    assert_exact(results)
    return 0


def _profile_json(p) -> dict:
    import dataclasses

    d = dataclasses.asdict(p)
    d.pop("path", None)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}
