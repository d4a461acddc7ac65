"""One workload under several drafters: a trace as another drafter would have drafted it (``simmoe sweep --drafter``).

A pool is its drafter's, so a replay never charges another drafter's cost
on it (:func:`simmoe.drafters.for_trace`).  A synthetic trace, though,
records everything that made it (its generative parameters, seed, requests
and temperature: ``meta.synth_params``, ``meta.provenance``), and the
generator keeps a workload's lengths, text, stretches, predictability and
routes whatever the drafter (docs/synthetic-traces.md, "Drafters"); so the
same workload with another drafter's pools and acceptance is generated
again here, as ``simmoe synth --drafter`` would make it (the drafter's
fitted acceptance for the preset where one exists).  A recorded or imported
trace has no generator to ask: another drafter on it is refused in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simmoe.errors import SimmoeError


def declared(spec: str) -> set[str]:
    """The parameter names drafter ``spec`` declares (its ``PARAMS``; none for a plugin without them)."""
    from simmoe.drafters import load

    return {p[0] for p in getattr(load(spec), "PARAMS", ())}


def with_drafter(trace: Any, spec: str, params: Mapping[str, Any] | None = None, requests: int | None = None) -> Any:
    """``trace`` under drafter ``spec``: its own drafter (``params`` may set what only the cost reads, as
    ``simmoe replay --drafter-param``), or the same synthetic workload generated again with ``spec``'s pools."""
    from dataclasses import replace

    from simmoe import drafters

    params = dict(params or {})
    name = drafters.build(spec, params).name
    own = drafters.trace_drafter(trace)[0]
    if spec in (own, (trace.meta.get("drafter") or {}).get("name", drafters.DEFAULT)):
        if not params:
            return trace
        d = drafters.for_trace(trace, spec, params)   # a parameter that would change the pools is refused here
        meta = dict(trace.meta)
        meta["drafter"] = {**dict(meta.get("drafter") or {"name": d.name}), "params": d.parameters()}
        return replace(trace, meta=meta)
    if not trace.is_synthetic or "synth_params" not in trace.meta:
        what = "it is not synthetic" if not trace.is_synthetic else "its metadata holds no synth_params"
        raise SimmoeError(f"--drafter {name}: the trace's pools were drafted by {own} and {what}, so no generator "
                          "can draft its workload again (a replay charges the drafter that made the pools)")
    return regenerate(trace, spec, params, requests)


def regenerate(trace: Any, spec: str, params: Mapping[str, Any], requests: int | None = None) -> Any:
    """The synthetic workload of ``trace`` generated again with drafter ``spec`` (its first ``requests``
    requests if given); its provenance says so, and where the drafter's acceptance comes from."""
    from simmoe.drafters.fitted import for_workload
    from simmoe.synth import generate
    from simmoe.synth.params import SynthParams

    prov = trace.meta.get("provenance") or {}
    preset = prov.get("preset")
    drafter, note = for_workload(spec, dict(params), preset)
    synth = SynthParams.from_dict(trace.meta["synth_params"])
    subset = trace.meta.get("subset")
    index = list(subset) if subset is not None else list(range(int(trace.meta.get("num_requests",
                                                                                   len(trace.requests)))))
    if requests is not None:
        index = index[:int(requests)]
    temperature = float((trace.meta.get("sampling") or {}).get("temperature", 0.0))
    fitted = tuple(prov.get("fitted_to") or ()) + (
        f"then drafted again by {drafter.name} (simmoe.drafters.workload: the same workload, seed "
        f"{prov.get('seed', 0)})",) + ((note,) if note else ())
    default = drafter.name == "eagle3"
    pool = drafter.pool_shape()
    return generate(synth.with_(pool=pool), seed=int(prov.get("seed", 0)), subset=index, preset=preset,
                    fitted_to=fitted, temperature=temperature, drafter=None if default else drafter)
