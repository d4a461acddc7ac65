"""Drafters as components: pool shape, acceptance model and drafting cost in one place (:class:`simmoe.api.Drafter`).

A layer of its own, between the synthetic generator and the hardware
descriptions below (it uses both: the generator's pool drafting, the
physical model's roofline) and the replay above; neither ``synth`` nor
``hardware`` imports it (docs/architecture.md).  The synthetic generator
takes a drafter as an argument; the commands resolve one by name here.

Found like the replay's plugins: simmoe's own and installed packages'
under the entry-point group ``simmoe.drafters`` (:data:`simmoe.api.DRAFTER_GROUP`),
or ``module:Name``; a class is imported only when a command uses it.

A trace remembers its drafter (``meta.drafter``: name and parameters;
absent: EAGLE-3, the pools of every trace made before drafters were
components), so a replay charges the drafting of the drafter that made
the pools (:func:`for_trace`, :func:`profile_for_trace`).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterable, Mapping
from typing import Any

from simmoe.api import DRAFTER_GROUP
from simmoe.errors import SimmoeError

DEFAULT = "eagle3"
ORDER = ("eagle3", "mtp", "llama-chain", "dflash", "lookahead")   # simmoe's own, in the order of its documentation
REQUIRED = ("pool_shape", "level_mean", "drafting_ms", "parameters")


@functools.cache
def _entry_points() -> dict[str, tuple[Any, ...]]:
    from importlib.metadata import entry_points

    found: dict[str, tuple[Any, ...]] = {}
    for ep in entry_points().select(group=DRAFTER_GROUP):
        found[ep.name] = found.get(ep.name, ()) + (ep,)
    return found


def names() -> list[str]:
    """Registered drafters: simmoe's own in :data:`ORDER`, then plugins alphabetically."""
    found = _entry_points()
    return [n for n in ORDER if n in found] + sorted(n for n in found if n not in ORDER)


@functools.cache
def load(spec: str) -> type:
    """The drafter class registered as ``spec`` or named ``module:Name``, checked against the protocol."""
    if ":" in spec:
        module, _, attr = spec.partition(":")
        try:
            obj = getattr(importlib.import_module(module), attr)
        except Exception as exc:   # an import error of any kind is one line naming the drafter
            raise SimmoeError(f"drafter {spec!r} cannot be loaded: {type(exc).__name__}: {exc}") from None
    else:
        eps = _entry_points().get(spec, ())
        if not eps:
            raise SimmoeError(f"unknown drafter {spec!r} (known: {', '.join(names()) or 'none: pip install -e .'})")
        if len(eps) > 1:
            raise SimmoeError(f"drafter {spec!r} is registered by two distributions; name it as module:Name")
        try:
            obj = eps[0].load()
        except Exception as exc:
            raise SimmoeError(f"drafter {spec!r} cannot be loaded: {type(exc).__name__}: {exc}") from None
    missing = [m for m in REQUIRED if not callable(getattr(obj, m, None))]
    if not isinstance(obj, type) or missing or not isinstance(getattr(obj, "name", None), str):
        what = f"lacks {', '.join(missing)}" if missing else "is not a class with a name"
        raise SimmoeError(f"drafter {spec!r} {what} (simmoe.api.Drafter)")
    return obj


def build(spec: str, params: Mapping[str, Any] | None = None) -> Any:
    """A drafter built from its parameters (their checks are the drafter's, one line each)."""
    cls = load(spec)
    try:
        drafter = cls(dict(params or {}))
    except SimmoeError:
        raise
    except Exception as exc:
        raise SimmoeError(f"drafter {spec!r}: {type(exc).__name__}: {exc}") from None
    if ":" in spec:   # a trace records how to find it again (its name is registered nowhere)
        drafter.spec = spec
    return drafter


def parse_params(items: Iterable[str] | None) -> dict[str, str]:
    """``KEY=VALUE`` strings (``--drafter-param``) as a dict; a malformed or repeated one is refused."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise SimmoeError(f"--drafter-param {item!r}: write KEY=VALUE")
        if key in out:
            raise SimmoeError(f"--drafter-param {key}: given twice")
        out[key] = value.strip()
    return out


def trace_drafter(trace: Any) -> tuple[str, dict[str, Any]]:
    """The name and parameters of the drafter that made ``trace``'s pools (EAGLE-3 when none is named)."""
    d = (trace.meta or {}).get("drafter")
    if not d:
        return DEFAULT, {}
    return str(d.get("spec") or d.get("name", DEFAULT)), dict(d.get("params") or {})


def for_trace(trace: Any, name: str | None = None, params: Mapping[str, Any] | None = None) -> Any:
    """The trace's drafter, rebuilt from its metadata; ``name`` (if given) must be it, ``params`` override.

    A pool is its drafter's: another drafter's cost on it means nothing, so a
    different ``name`` is refused in one line.  ``params`` may change what only
    the cost reads (the draft model of ``llama-chain``); one that would have
    changed the pools is refused.
    """
    own, recorded = trace_drafter(trace)
    if name is not None and name not in (own, (trace.meta.get("drafter") or {}).get("name", DEFAULT)):
        raise SimmoeError(f"--drafter {name}: the trace's pools were drafted by {own} (its metadata); a replay "
                          f"charges the drafter that made them (generate a trace with simmoe synth --drafter {name})")
    drafter = build(own, {**recorded, **dict(params or {})})
    if params and build(own, recorded).pool_shape() != drafter.pool_shape():
        raise SimmoeError(f"--drafter-param: {', '.join(sorted(params))} would change {own}'s pools; "
                          "the trace's pools are fixed (generate another trace)")
    return drafter


def profile_for_trace(trace: Any, profile: Any, name: str | None = None,
                      params: Mapping[str, Any] | None = None) -> Any:
    """``profile`` with the drafting of ``trace``'s drafter (EAGLE-3's traces: the profile unchanged)."""
    from simmoe.drafters.cost import profile_with_drafter

    drafter = for_trace(trace, name, params)
    out = profile_with_drafter(profile, drafter)
    if drafter.name != DEFAULT:
        out.physical.draft_ms(1, 1, served=False)   # a cost that cannot be computed is refused before any work
    return out


def with_trace_drafter(trace: Any, profile: Any) -> Any:
    """The profile a replay of ``trace`` uses: already a drafter's (a command chose its parameters), or the trace's.

    Every replay enters the engine through here, so a trace of another
    drafter is never charged EAGLE-3's drafting; EAGLE-3's traces keep the
    profile itself.
    """
    from simmoe.drafters.cost import DrafterCpuForward, DrafterPhysical

    chosen = isinstance(getattr(profile, "physical", None), (DrafterPhysical, DrafterCpuForward))
    if chosen or trace_drafter(trace)[0] == DEFAULT:
        return profile
    return profile_for_trace(trace, profile)
