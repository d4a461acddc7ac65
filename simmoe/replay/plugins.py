"""Finding selectors, cache and prefetch policies and placements by name: entry points and ``module:Name``.

Every implementation — simmoe's own included — is a class registered under
one of the entry-point groups of :data:`simmoe.api.ENTRY_POINT_GROUPS`
(``simmoe.selectors``, ``simmoe.caches``, ``simmoe.prefetch``; simmoe's own
in ``pyproject.toml``), or named on the command line as ``module:Name``
(``package.module:Class``, importable from the current environment).  A
placement of the experts (``simmoe.placements``) is named in the profile,
``~placement=NAME``; simmoe's own (``~cpu-layers:N``, ``~cpu-all``,
``~cpu-misses``, ``~fiddler``) are named by those forms and registered nowhere.

Only the names are read when a command starts (the distributions' metadata);
a class is imported when a replay uses it, so a plugin that cannot be
imported breaks only the replays that name it.  A name registered by two
distributions is refused when used (one line naming both): a plugin cannot
silently replace simmoe's own ``lru`` or ``specfit``.

Whatever goes wrong — an unknown name, a module that fails to import (or
exits while importing), a class that does not satisfy the protocol of
:mod:`simmoe.api` — is one :class:`~simmoe.errors.SimmoeError` line naming
the plugin (exit 2).  A plugin is built fresh for every replay
(:func:`build`), and its calls are guarded: an exception, or a
``sys.exit``, inside them is one line naming it (:func:`guarded`).

Names list simmoe's own first, in the order of its documentation
(:data:`ORDER`), then installed plugins alphabetically.
"""

from __future__ import annotations

import copy
import functools
import importlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from simmoe.api import ENTRY_POINT_GROUPS
from simmoe.errors import SimmoeError

# what each kind is called in messages, and the methods its protocol requires
KIND_NAMES = {"selector": "selector", "cache": "cache policy", "prefetch": "prefetch policy",
              "placement": "placement"}
REQUIRED = {"selector": ("select",), "cache": ("reset", "observe", "scores"),
            "prefetch": ("reset", "drafting", "layers"), "placement": ("reset", "place")}
PROTOCOLS = {"selector": "Selector", "cache": "CachePolicy", "prefetch": "PrefetchPolicy", "placement": "Placement"}
# simmoe's own, in the order its documentation lists them
ORDER = {
    "selector": ("ar", "eagle3", "evict", "ddd", "coverage", "specfit", "specfit-full", "optimal",
                 "unconstrained", "oracle", "specfit-prefetch", "llama-chain"),
    "cache": ("lru", "lfu", "belady", "static", "least-stale", "lfru", "eam", "learned"),
    "prefetch": ("draft", "next-layer", "oracle", "eam", "score"),
    "placement": (),     # simmoe's own are named by their own forms in the profile (module docstring)
}
# names that mean "no such stage" rather than an implementation
NONE_NAMES = {"cache": "none", "prefetch": "none"}
OWN_DISTRIBUTION = "simmoe"
# a selector's methods that run plugin code during a replay (the selection stage reports their exceptions)
SELECTOR_CALLS = ("select", "prepare")


@functools.cache
def _installed() -> dict[str, dict[str, tuple[Any, ...]]]:
    """Every kind's entry points by name (all the distributions registering it), from one metadata scan.

    Reading the metadata imports nothing; one scan serves the three groups (a scan per group costs twice).
    """
    from importlib.metadata import entry_points

    every = entry_points()   # one distribution per name: the first found on sys.path
    found: dict[str, dict[str, tuple[Any, ...]]] = {}
    for kind, group in ENTRY_POINT_GROUPS.items():
        by_name: dict[str, tuple[Any, ...]] = {}
        for ep in every.select(group=group):
            by_name[ep.name] = by_name.get(ep.name, ()) + (ep,)
        found[kind] = by_name
    return found


def distribution(ep: Any) -> str:
    """The name of the distribution that registers entry point ``ep`` ("?" when unknown)."""
    dist = getattr(ep, "dist", None)
    return str(getattr(dist, "name", None) or "?")


def _entry_points(kind: str) -> dict[str, tuple[Any, ...]]:
    found = _installed()[kind]
    if ORDER[kind] and not any(n in found for n in ORDER[kind]):
        raise SimmoeError(f"no {KIND_NAMES[kind]} is registered under the entry-point group "
                          f"{ENTRY_POINT_GROUPS[kind]!r}: simmoe is not installed (pip install -e .)")
    return found


def names(kind: str) -> list[str]:
    """Registered names of ``kind``: simmoe's own in :data:`ORDER`, then plugins alphabetically."""
    found = _entry_points(kind)
    own = [n for n in ORDER[kind] if n in found]
    return own + sorted(n for n in found if n not in ORDER[kind])


def known(kind: str) -> str:
    """The names a message lists as known (with ``none`` where the stage may be absent)."""
    extra = [NONE_NAMES[kind]] if kind in NONE_NAMES else []
    return ", ".join(extra + names(kind)) or f"none registered under {ENTRY_POINT_GROUPS[kind]!r}"


def _failure(exc: BaseException) -> str:
    """An exception raised by plugin code, in words (a ``sys.exit`` said as such)."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r}) (a plugin may not end the process; raise an exception)"
    return f"{type(exc).__name__}: {exc}"


@functools.cache
def load(kind: str, spec: str) -> type:
    """The class registered as ``spec``, or named by ``spec = "module:Name"``; checked against its protocol."""
    obj = _import_module_name(kind, spec) if ":" in spec else _load_entry_point(kind, spec)
    check_class(kind, spec, obj)
    return obj


def _import_module_name(kind: str, spec: str) -> Any:
    what = KIND_NAMES[kind]
    module, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except ImportError as exc:
        raise SimmoeError(f"{what} {spec!r}: cannot import module {module!r} ({exc})") from None
    except AttributeError:
        raise SimmoeError(f"{what} {spec!r}: module {module!r} has no {attr!r}") from None
    except (Exception, SystemExit) as exc:  # the plugin's own module raised (or exited) while importing
        raise SimmoeError(f"{what} {spec!r}: importing {module!r} {_raised(exc)}") from None
    return obj


def _raised(exc: BaseException) -> str:
    return _failure(exc) if isinstance(exc, SystemExit) else f"raised {_failure(exc)}"


def _load_entry_point(kind: str, spec: str) -> Any:
    what = KIND_NAMES[kind]
    found = _entry_points(kind)
    if spec not in found:
        raise SimmoeError(f"unknown {what} {spec!r}; known: {known(kind)} (or module:Name)")
    eps = found[spec]
    if len(eps) > 1:
        dists = [distribution(ep) for ep in eps]
        dists.sort(key=lambda d: d != OWN_DISTRIBUTION)   # simmoe's own first: the one being shadowed
        own = dists[0] == OWN_DISTRIBUTION
        raise SimmoeError(f"{what} {spec!r} is registered by two distributions, {dists[0]} and "
                          f"{' and '.join(dists[1:])}; "
                          + (f"a plugin may not take the name of simmoe's own: rename it in {dists[1]}'s "
                             "entry points, or uninstall it" if own else
                             "uninstall one, or name the plugin as module:Name"))
    ep = eps[0]
    try:
        return ep.load()
    except (Exception, SystemExit) as exc:
        raise SimmoeError(f"{what} {spec!r} (entry point {ep.value} of distribution {distribution(ep)}): "
                          f"cannot be loaded: {_failure(exc)}") from None


def check_class(kind: str, spec: str, obj: Any) -> None:
    """Refuse, in one line, an object that does not satisfy ``kind``'s protocol in :mod:`simmoe.api`."""
    what = KIND_NAMES[kind]
    proto = PROTOCOLS[kind]
    if not isinstance(obj, type):
        raise SimmoeError(f"{what} {spec!r} is a {type(obj).__name__}, not a class implementing "
                          f"simmoe.api.{proto}")
    missing = [m for m in REQUIRED[kind] if not callable(getattr(obj, m, None))]
    if missing:
        raise SimmoeError(f"{what} {spec!r} does not satisfy simmoe.api.{proto}: no method "
                          + ", ".join(f"{m}()" for m in missing))
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name:
        raise SimmoeError(f"{what} {spec!r} does not satisfy simmoe.api.{proto}: no class attribute 'name'")


def summaries(kind: str) -> list[tuple[str, str]]:
    """(name, summary) of every registered ``kind``, for help texts: one that cannot be loaded says so."""
    out = []
    for n in names(kind):
        try:
            out.append((n, str(getattr(load(kind, n), "summary", ""))))
        except SimmoeError as exc:
            out.append((n, f"(cannot be used: {exc})"))
    return out


def build(kind: str, spec: str, cls: type, *args: Any) -> Any:
    """A new instance ``cls(*args)`` of plugin ``spec`` (one per replay), its calls guarded.

    An exception (or ``sys.exit``) inside the constructor is one line naming
    the plugin; so are those inside its methods later (:func:`guarded`).
    """
    try:
        obj = cls(*args)
    except SimmoeError:
        raise
    except (Exception, SystemExit) as exc:
        raise SimmoeError(f"{KIND_NAMES[kind]} {spec!r}: building it {_raised(exc)}") from None
    if kind == "selector":
        return _exits_guarded(spec, obj)
    return guarded(kind, spec, obj)


def instantiate(kind: str, spec: str, *args: Any) -> Any:
    """``load(kind, spec)(*args)``, built by :func:`build` (a new instance each call)."""
    return build(kind, spec, load(kind, spec), *args)


class Registry(Mapping):
    """A read-only mapping name → class over one kind's registered implementations (loaded on access)."""

    def __init__(self, kind: str):
        self.kind = kind

    def __getitem__(self, name: str) -> type:
        if ":" not in name and name not in _entry_points(self.kind):
            raise KeyError(name)
        return load(self.kind, name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in _entry_points(self.kind) or ":" in name)

    def __iter__(self) -> Iterator[str]:
        return iter(names(self.kind))

    def __len__(self) -> int:
        return len(_entry_points(self.kind))


def plugin_error(kind: str, spec: str, exc: BaseException, where: str = "") -> SimmoeError:
    """One line for an exception raised inside a plugin during a replay (``where``: "in scores()", ...)."""
    at = f" {where}" if where else ""
    if isinstance(exc, SystemExit):
        return SimmoeError(f"{KIND_NAMES[kind]} {spec!r}{at} {_failure(exc)}")
    return SimmoeError(f"{KIND_NAMES[kind]} {spec!r} raised {type(exc).__name__}{at}: {exc}")


def guarded(kind: str, spec: str, obj: Any) -> Any:
    """``obj`` with every method call turning an exception into one line naming the plugin.

    simmoe's own implementations are returned as they are (no wrapper on the hot path).
    """
    if type(obj).__module__.startswith("simmoe."):
        return obj
    return _Guard(kind, spec, obj)


def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (``a`` itself keeps its flags): how a plugin is handed an array."""
    v = a.view()
    v.flags.writeable = False
    return v


def read_only_trace(trace: Any) -> Any:
    """A shallow copy of ``trace`` to hand a plugin: every array in it (and in its request table) a
    read-only view, its ``meta`` a deep copy.

    Whatever the plugin does to its copy, the replay's trace is unchanged, for
    this replay and every later one in the process.  O(columns): no array is copied.
    """
    if trace is None:
        return None
    out, requests = copy.copy(trace), copy.copy(trace.requests)
    for obj in (out, requests):
        for name, value in list(vars(obj).items()):     # the dataclass fields and cached arrays alike
            if isinstance(value, np.ndarray):
                object.__setattr__(obj, name, read_only(value))
    object.__setattr__(out, "requests", requests)
    object.__setattr__(out, "meta", copy.deepcopy(trace.meta))
    return out


def spec_of(obj: Any) -> str:
    """The name plugin ``obj`` was built under, as the user typed it (a registered name or ``module:Name``).

    Known for a guarded instance (:func:`guarded`); for any other object, its ``name`` attribute.
    """
    if isinstance(obj, _Guard):
        return obj._spec
    return str(getattr(obj, "name", type(obj).__name__))


def _exits_guarded(spec: str, obj: Any) -> Any:
    """A plugin selector whose ``select``/``prepare`` turn ``sys.exit`` into one line naming it.

    Its other exceptions are the selection stage's to report (with the request
    and position); the instance keeps its class, which the stage checks.
    """
    if type(obj).__module__.startswith("simmoe."):
        return obj
    for name in SELECTOR_CALLS:
        method = getattr(obj, name, None)
        if callable(method):
            try:
                setattr(obj, name, _no_exit(spec, name, method))
            except AttributeError:   # __slots__ without __dict__: left as it is
                pass
    return obj


def _no_exit(spec: str, name: str, method: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except SystemExit as exc:
            raise plugin_error("selector", spec, exc, f"in {name}()") from None

    return call


class _Guard:
    """A plugin instance whose method calls report exceptions as :func:`plugin_error`."""

    def __init__(self, kind: str, spec: str, obj: Any):
        self._kind, self._spec, self._obj = kind, spec, obj

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._obj, name)
        if not callable(attr):
            return attr
        kind, spec = self._kind, self._spec

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except SimmoeError:
                raise
            except (Exception, SystemExit) as exc:   # KeyboardInterrupt goes on: an interruption
                raise plugin_error(kind, spec, exc, f"in {name}()") from None

        return call
