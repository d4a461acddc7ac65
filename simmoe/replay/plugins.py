"""Finding selectors, cache policies and prefetch policies by name: entry points and ``module:Name``.

Every implementation — simmoe's own included — is a class registered under
one of the entry-point groups of :data:`simmoe.api.ENTRY_POINT_GROUPS`
(``simmoe.selectors``, ``simmoe.caches``, ``simmoe.prefetch``; simmoe's own
in ``pyproject.toml``), or named on the command line as ``module:Name``
(``package.module:Class``, importable from the current environment).

Whatever goes wrong — an unknown name, a module that fails to import, a class
that does not satisfy the protocol of :mod:`simmoe.api` — is one
:class:`~simmoe.errors.SimmoeError` line naming the plugin (exit 2).

Names list simmoe's own first, in the order of its documentation
(:data:`ORDER`), then installed plugins alphabetically.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from simmoe.api import ENTRY_POINT_GROUPS
from simmoe.errors import SimmoeError

# what each kind is called in messages, and the methods its protocol requires
KIND_NAMES = {"selector": "selector", "cache": "cache policy", "prefetch": "prefetch policy"}
REQUIRED = {"selector": ("select",), "cache": ("reset", "observe", "scores"),
            "prefetch": ("reset", "drafting", "layers")}
# simmoe's own, in the order its documentation lists them
ORDER = {
    "selector": ("ar", "eagle3", "evict", "ddd", "coverage", "specfit", "specfit-full", "optimal",
                 "unconstrained", "oracle", "specfit-prefetch"),
    "cache": ("lru", "lfu", "belady", "static", "least-stale", "lfru", "eam", "learned"),
    "prefetch": ("draft", "next-layer", "oracle", "eam", "score"),
}
# names that mean "no such stage" rather than an implementation
NONE_NAMES = {"cache": "none", "prefetch": "none"}


@functools.cache
def _entry_points(kind: str) -> dict[str, Any]:
    from importlib.metadata import entry_points

    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUPS[kind])}
    if not any(n in found for n in ORDER[kind]):
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
    return ", ".join(extra + names(kind))


@functools.cache
def load(kind: str, spec: str) -> type:
    """The class registered as ``spec``, or named by ``spec = "module:Name"``; checked against its protocol."""
    what = KIND_NAMES[kind]
    if ":" in spec:
        module, _, attr = spec.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except ImportError as exc:
            raise SimmoeError(f"{what} {spec!r}: cannot import module {module!r} ({exc})") from None
        except AttributeError:
            raise SimmoeError(f"{what} {spec!r}: module {module!r} has no {attr!r}") from None
        except Exception as exc:  # the plugin's own module raised while importing
            raise SimmoeError(f"{what} {spec!r}: importing {module!r} raised "
                              f"{type(exc).__name__}: {exc}") from None
    else:
        found = _entry_points(kind)
        if spec not in found:
            raise SimmoeError(f"unknown {what} {spec!r}; known: {known(kind)} (or module:Name)")
        try:
            obj = found[spec].load()
        except Exception as exc:
            raise SimmoeError(f"{what} {spec!r} (entry point {found[spec].value}): cannot be loaded: "
                              f"{type(exc).__name__}: {exc}") from None
    check_class(kind, spec, obj)
    return obj


def check_class(kind: str, spec: str, obj: Any) -> None:
    """Refuse, in one line, an object that does not satisfy ``kind``'s protocol in :mod:`simmoe.api`."""
    what = KIND_NAMES[kind]
    proto = {"selector": "Selector", "cache": "CachePolicy", "prefetch": "PrefetchPolicy"}[kind]
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


def instantiate(kind: str, spec: str, *args: Any) -> Any:
    """``load(kind, spec)(*args)``, with an exception inside the constructor reported as one line."""
    cls = load(kind, spec)
    try:
        return cls(*args)
    except SimmoeError:
        raise
    except Exception as exc:
        raise SimmoeError(f"{KIND_NAMES[kind]} {spec!r}: building it raised {type(exc).__name__}: {exc}") from None


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
    return SimmoeError(f"{KIND_NAMES[kind]} {spec!r} raised {type(exc).__name__}{at}: {exc}")


def guarded(kind: str, spec: str, obj: Any) -> Any:
    """``obj`` with every method call turning an exception into one line naming the plugin.

    simmoe's own implementations are returned as they are (no wrapper on the hot path).
    """
    if type(obj).__module__.startswith("simmoe."):
        return obj
    return _Guard(kind, spec, obj)


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
            except Exception as exc:
                raise plugin_error(kind, spec, exc, f"in {name}()") from None

        return call
