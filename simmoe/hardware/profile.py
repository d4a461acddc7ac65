"""Hardware profiles: the timing parameters of one GPU + host link + model, read from TOML.

A profile holds three things (format in ``docs/hardware-profiles.md``):

* the event model's parameters (:mod:`simmoe.replay.timing`): copy time per expert
  and copies in flight, the fixed non-expert time of a forward, compute
  time per executed expert, drafting time per level, commit and selector
  overheads;
* the selectors' predictive cost models: SpecFit's T̂(S) = b_|S| + βF(S)
  (Eq. 4) fitted with and without the expert cache (App. B), and EVICT's
  profiled step latency C(k) (EVICT §3.2.3, Table 4);
* provenance: ``source`` says whether the numbers were fitted to published
  figures (and which) or measured by ``hwprobe`` on a device.

Shipped profiles live in ``simmoe/hardware/profiles/<name>.toml``; any other path to
a ``.toml`` file works too.  :func:`save_profile` writes the same format
atomically, so ``hwprobe calibrate`` and ``simmoe fit`` produce files that
:func:`load_profile` reads back unchanged.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from simmoe.atomicio import write_text_atomic
from simmoe.errors import ProfileError

PROFILE_DIR = Path(__file__).parent / "profiles"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class HardwareProfile:
    """One hardware profile.  Times in milliseconds, sizes in bytes, bandwidth in GB/s (1e9 B/s)."""

    name: str
    description: str
    # "fitted to published figures (calibration set: ...)" | "measured by hwprobe on <device>"
    source: str
    device: str = ""
    model: str = ""
    expert_bytes: int = 0
    num_layers: int = 0
    # [copy] host-to-device expert copies
    resident: bool = False           # experts live in GPU memory: no copies at all (EVICT's regime)
    copies_in_flight: int = 2        # c: copies sharing the copy engine at once
    copy_ms: float = 0.0             # mean duration of one expert copy while up to c copies are in flight
    copy_cv: float = 0.0             # coefficient of variation of a copy's duration (gamma); 0 = fixed
    copy_samples_ms: tuple[float, ...] = ()   # measured copy durations; drawn from when present
    link_gbps: float = 0.0           # host-to-device bandwidth, for the physical check (0 = unknown)
    # [compute] one target forward
    forward_ms: float = 0.0          # non-expert time of a forward (attention, router, norms, head, sync)
    token_ms: float = 0.0            # extra non-expert time per token beyond the first
    expert_ms: float = 0.0           # compute time per executed expert (per layer, per forward)
    cache_overhead_ms: float = 0.0   # extra time per forward when an expert cache is kept
    prefill_token_ms: float = 0.0    # non-expert time per prompt token of a prefill forward
    overlap: bool = True             # misses' copies overlap compute (False: a layer computes after all its copies)
    # [draft] and [cycle]
    draft_level_ms: float = 0.0      # drafting time per drafted level
    draft_fixed_ms: float = 0.0      # drafting time per cycle that drafts at all
    commit_ms: float = 0.0           # commit overhead per cycle (KV compaction, bookkeeping)
    selector_ms: float = 0.0         # selector time per cycle when it is not measured
    # [cost_model] SpecFit Eq. 4, App. B
    cost_b_cache: tuple[float, ...] = ()
    cost_beta_cache: float = 0.0
    cost_b_no_cache: tuple[float, ...] = ()
    cost_beta_no_cache: float = 0.0
    # [evict] EVICT C(k): evict_cost[k - 1] = whole-step latency with k verified draft tokens
    evict_cost: tuple[float, ...] = ()
    notes: str = ""
    path: str | None = field(default=None, compare=False)
    # the physical cost model behind a profile named MODEL@GPU[...] (simmoe.hardware.physical); not in TOML
    physical: Any = field(default=None, compare=False, repr=False)

    # -- derived ------------------------------------------------------------
    @property
    def link_ms_per_expert(self) -> float:
        """Physical lower bound on the copy engine's time per expert: bytes / bandwidth (0 if unknown)."""
        if self.link_gbps <= 0 or self.expert_bytes <= 0:
            return 0.0
        return self.expert_bytes / (self.link_gbps * 1e9) * 1e3

    @property
    def effective_copy_ms(self) -> float:
        """Copy-engine time per expert in steady state: copy_ms / c (0 when resident)."""
        return 0.0 if self.resident else self.copy_ms / self.copies_in_flight

    def cost_model(self, cache: bool):
        """SpecFit's predictive model T̂(S) = b_|S| + βF(S) (Eq. 4) fitted with or without the cache.

        A :class:`~simmoe.hardware.profile_cost.ProfileCostModel` (a ``solvers.CostModel``
        that knows this profile and its physical counterpart).  A profile without the
        coefficients is refused in one line that says which physical profile derives them.
        """
        from simmoe.hardware.profile_cost import ProfileCostModel

        b = self.cost_b_cache if cache else self.cost_b_no_cache
        beta = self.cost_beta_cache if cache else self.cost_beta_no_cache
        if not b:
            which = "cost_model.cache" if cache else "cost_model.no_cache"
            fitted = "EVICT's C(k) only" if self.evict_cost else "no selector cost model"
            alt = self.counterpart()
            raise ProfileError(
                f"profile {self.name}: has no [{which}] coefficients (SpecFit's b_k and beta, Eq. 4; it was fitted "
                f"to {fitted}), so the selectors that price experts (specfit, specfit-full, optimal, "
                "unconstrained) cannot run on it; "
                + (f"the physical profile {alt} derives them from the model's geometry and the GPU "
                   f"(--hardware {alt})" if alt else "fit them (simmoe fit, hwprobe calibrate) or use a physical "
                   "profile MODEL@GPU[+LINK] (simmoe models)"))
        return ProfileCostModel(b, beta, self.name, self.counterpart)    # looked up if an error needs it

    def counterpart(self) -> str | None:
        """The physical profile ``MODEL@GPU[+LINK]`` of this profile's model, GPU and regime, if catalogued."""
        from simmoe.hardware.physical import counterpart_name

        return counterpart_name(self)

    def replace(self, **changes) -> HardwareProfile:
        """A copy with ``changes`` applied and validated."""
        return validate(replace(self, **changes))


# --------------------------------------------------------------------------
# TOML mapping: (section, key) ↔ dataclass field
# --------------------------------------------------------------------------
_LAYOUT: list[tuple[str | None, str, str]] = [
    (None, "name", "name"), (None, "description", "description"), (None, "source", "source"),
    (None, "device", "device"), (None, "model", "model"), (None, "expert_bytes", "expert_bytes"),
    (None, "num_layers", "num_layers"), (None, "notes", "notes"),
    ("copy", "resident", "resident"), ("copy", "copies_in_flight", "copies_in_flight"),
    ("copy", "copy_ms", "copy_ms"), ("copy", "copy_cv", "copy_cv"),
    ("copy", "samples_ms", "copy_samples_ms"), ("copy", "link_gbps", "link_gbps"),
    ("compute", "forward_ms", "forward_ms"), ("compute", "token_ms", "token_ms"),
    ("compute", "expert_ms", "expert_ms"), ("compute", "cache_overhead_ms", "cache_overhead_ms"),
    ("compute", "prefill_token_ms", "prefill_token_ms"), ("compute", "overlap", "overlap"),
    ("draft", "level_ms", "draft_level_ms"), ("draft", "fixed_ms", "draft_fixed_ms"),
    ("cycle", "commit_ms", "commit_ms"), ("cycle", "selector_ms", "selector_ms"),
    ("cost_model.cache", "b", "cost_b_cache"), ("cost_model.cache", "beta", "cost_beta_cache"),
    ("cost_model.no_cache", "b", "cost_b_no_cache"), ("cost_model.no_cache", "beta", "cost_beta_no_cache"),
    ("evict", "cost_ms", "evict_cost"),
]
_REQUIRED = {"name", "description", "source", "copy_ms", "forward_ms", "expert_ms"}
# Plausible ranges: a value outside is a typo or a unit mix-up, and huge values overflow the replay.
MAX_MS = 1e6                 # any time of one operation, in ms (1000 s)
_UPPER = {"copy_cv": 10.0, "link_gbps": 1e5}   # cv of a copy's duration; GB/s
MAX_COPIES_IN_FLIGHT = 1024
MAX_EXPERT_BYTES = 2**40
MAX_LAYERS = 10_000
_TYPES = {f.name: f.type for f in fields(HardwareProfile)}


def _key(section, key):
    return f"{section}.{key}" if section else key


def _coerce(where: str, fname: str, value: Any):
    kind = _TYPES[fname]
    if kind == "str":
        if not isinstance(value, str):
            raise ProfileError(f"{where} must be a string, got {value!r}")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise ProfileError(f"{where} must be true or false, got {value!r}")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProfileError(f"{where} must be an integer, got {value!r}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProfileError(f"{where} must be a number, got {value!r}")
        return float(value)
    if kind.startswith("tuple"):
        if not isinstance(value, list) or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in value):
            raise ProfileError(f"{where} must be a list of numbers, got {value!r}")
        return tuple(float(x) for x in value)
    raise AssertionError(kind)  # pragma: no cover


def _check_unknown(doc: dict[str, Any], origin: str) -> None:
    """Unknown keys are mistakes: a typo would silently fall back to a default."""
    sections = {s for s, _, _ in _LAYOUT if s}
    allowed: dict[str | None, set[str]] = {None: {"format"}}
    for section, key, _ in _LAYOUT:
        allowed.setdefault(section, set()).add(key)
    # a section's tables are allowed where they are the prefix of a known section
    for section in sections:
        parts = section.split(".")
        for i in range(len(parts)):
            parent = ".".join(parts[:i]) or None
            allowed.setdefault(parent, set()).add(parts[i])

    def walk(table, prefix):
        for k, v in table.items():
            full = f"{prefix}.{k}" if prefix else k
            if k not in allowed.get(prefix, set()):
                raise ProfileError(f"{origin}: unknown field {full!r}")
            if full in allowed and not isinstance(v, dict):
                raise ProfileError(f"{origin}: [{full}] must be a table")
            if isinstance(v, dict):
                if full not in allowed:
                    raise ProfileError(f"{origin}: field {full!r} must not be a table")
                walk(v, full)

    walk(doc, None)


def from_dict(doc: dict[str, Any], *, origin: str = "profile") -> HardwareProfile:
    """Build and validate a profile from a parsed TOML document."""
    if not isinstance(doc, dict):
        raise ProfileError(f"{origin}: not a table")
    fmt = doc.get("format", FORMAT_VERSION)
    if fmt != FORMAT_VERSION:
        raise ProfileError(f"{origin}: unsupported profile format {fmt!r} (this simmoe reads {FORMAT_VERSION})")
    _check_unknown(doc, origin)
    values: dict[str, Any] = {}
    for section, key, fname in _LAYOUT:
        table = doc
        if section:
            for part in section.split("."):
                table = table.get(part, {}) if isinstance(table, dict) else {}
        if not isinstance(table, dict):
            raise ProfileError(f"{origin}: [{section}] must be a table")
        if key in table:
            values[fname] = _coerce(f"{origin}: field {_key(section, key)!r}", fname, table[key])
    for fname in sorted(_REQUIRED):
        if fname not in values:
            section, key = next((s, k) for s, k, f in _LAYOUT if f == fname)
            raise ProfileError(f"{origin}: missing field {_key(section, key)!r}")
    return validate(HardwareProfile(**values), origin=origin)


def validate(p: HardwareProfile, *, origin: str | None = None) -> HardwareProfile:
    """Range checks; raise :class:`ProfileError` naming the field (and the file, ``origin``).

    Returns ``p``.  A file is named by its path, not by the ``name`` inside it, which may
    be a copy of a shipped profile's.
    """
    who = origin if origin not in (None, "profile") else f"profile {p.name or '?'}"

    def nonneg(fname, key):
        v = getattr(p, fname)
        if not math.isfinite(v) or v < 0:
            raise ProfileError(f"{who}: field {key!r} must be a finite number >= 0, got {v!r}")
        hi = _UPPER.get(fname, MAX_MS)
        if v > hi:
            raise ProfileError(f"{who}: field {key!r} must be at most {hi:g}, got {v!r}")

    def times(values, key, what="finite numbers > 0"):
        if any(not math.isfinite(x) or x <= 0 for x in values):
            raise ProfileError(f"{who}: field {key!r} must hold {what}")
        if any(x > MAX_MS for x in values):
            raise ProfileError(f"{who}: field {key!r} must hold times of at most {MAX_MS:g} ms, "
                               f"got {max(values)!r}")

    if not p.name.strip():
        raise ProfileError(f"{who}: field 'name' must not be empty")
    if not p.source.strip():
        raise ProfileError(f"{who}: field 'source' must say where the numbers come from")
    if p.copies_in_flight < 1:
        raise ProfileError(f"{who}: field 'copy.copies_in_flight' must be >= 1, got {p.copies_in_flight}")
    if p.copies_in_flight > MAX_COPIES_IN_FLIGHT:
        raise ProfileError(f"{who}: field 'copy.copies_in_flight' must be at most {MAX_COPIES_IN_FLIGHT}, "
                           f"got {p.copies_in_flight}")
    if p.expert_bytes < 0 or p.num_layers < 0:
        raise ProfileError(f"{who}: fields 'expert_bytes' and 'num_layers' must be >= 0")
    if p.expert_bytes > MAX_EXPERT_BYTES:
        raise ProfileError(f"{who}: field 'expert_bytes' must be at most {MAX_EXPERT_BYTES} (1 TiB), "
                           f"got {p.expert_bytes}")
    if p.num_layers > MAX_LAYERS:
        raise ProfileError(f"{who}: field 'num_layers' must be at most {MAX_LAYERS}, got {p.num_layers}")
    for section, key, fname in _LAYOUT:
        if _TYPES[fname] == "float":
            nonneg(fname, _key(section, key))
    times(p.copy_samples_ms, "copy.samples_ms")
    if p.resident and (p.copy_ms > 0 or p.copy_samples_ms):
        raise ProfileError(f"{who}: a resident profile copies nothing: "
                           "'copy.copy_ms' must be 0 and 'copy.samples_ms' empty")
    for cache, b, beta in (("cache", p.cost_b_cache, p.cost_beta_cache),
                           ("no_cache", p.cost_b_no_cache, p.cost_beta_no_cache)):
        times(b, f"cost_model.{cache}.b")
        if beta and not b:
            raise ProfileError(f"{who}: field 'cost_model.{cache}.b' is missing (beta is given)")
    times(p.evict_cost, "evict.cost_ms")
    if p.link_ms_per_expert > 0 and not p.resident and p.copy_ms > 0:
        if p.effective_copy_ms < p.link_ms_per_expert * (1 - 1e-9):
            raise ProfileError(
                f"{who}: copy.copy_ms / copies_in_flight = {p.effective_copy_ms:.4g} ms per expert is faster "
                f"than the link allows ({p.expert_bytes} B at {p.link_gbps} GB/s = {p.link_ms_per_expert:.4g} ms)")
    return p


# --------------------------------------------------------------------------
# load / list / save
# --------------------------------------------------------------------------
def list_profiles() -> list[str]:
    """Names of the shipped profiles (``simmoe/hardware/profiles/*.toml``), sorted."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def load_profile(name_or_path: str | os.PathLike) -> HardwareProfile:
    """A shipped profile by name, or a ``.toml`` file by path.  ProfileError names what is wrong."""
    text = str(name_or_path)
    if not text.strip():        # Path("") is ".", which would be refused as a folder
        raise ProfileError(f"empty hardware profile name; shipped: {', '.join(list_profiles())}")
    _check_blanks(text)
    if "@" in text and not text.endswith(".toml"):
        return build_profile(text)
    path = Path(text)
    if not (text.endswith(".toml") or os.sep in text or path.exists()):
        path = PROFILE_DIR / f"{text}.toml"
        if not path.exists():
            raise ProfileError(f"unknown hardware profile {text!r}; shipped: {', '.join(list_profiles())} "
                               "(or give a path to a .toml file)")
    if path.is_dir():
        raise ProfileError(f"{path}: is a folder, not a profile file")
    if not path.is_file():
        raise ProfileError(f"no such profile file: {path}")
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: not a text file") from None
    prof = from_dict(doc, origin=str(path))
    return replace(prof, path=str(path))


def _check_blanks(text: str) -> None:
    """Refuse whitespace in a profile name, pointing at it (a pasted name's newline is invisible in any
    message); a path may hold blanks, but not at its ends unless such a file exists."""
    from simmoe.hardware.catalogue import blank_problem

    if "@" in text or not (text.endswith(".toml") or os.sep in text):
        problem, rule = blank_problem(text), "profile names hold no whitespace"
    elif text != text.strip() and not Path(text).exists():
        core = text.strip()     # only the ends count: the path's own blanks are the user's
        problem, rule = blank_problem(text.replace(core, "x", 1)), "a path holds none at its ends"
    else:
        return
    if problem is not None:
        raise ProfileError(f"hardware profile {text!r} {problem}: {rule}")


def build_profile(name: str) -> HardwareProfile:
    """The profile of the physical cost model ``MODEL@GPU[:tpN][+LINK][~SETTING]`` (simmoe.hardware.physical)."""
    from simmoe.hardware.cpu_profile import cpu_profile_fields, is_cpu_name
    from simmoe.hardware.physical import profile_fields

    if is_cpu_name(name):       # MODEL[/FORMAT]@GPU[+LINK]+CPU~PLACEMENT (docs/cpu-experts.md)
        return validate(HardwareProfile(**cpu_profile_fields(name)))
    return validate(HardwareProfile(**profile_fields(name)))


def profile_line(p: HardwareProfile) -> str:
    """One line naming a profile and what it models; a physical profile's serving term included."""
    return f"{p.name}: {p.description}" if p.description else p.name


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else "nan"
    if isinstance(v, str):
        out = []
        for ch in v:
            if ch in ('"', "\\"):
                out.append("\\" + ch)
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        return '"' + "".join(out) + '"'
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(type(v))


def to_toml(p: HardwareProfile, *, header: str = "") -> str:
    """The profile as TOML text (the format :func:`load_profile` reads).  ``header``: leading comment lines."""
    lines = [f"# {ln}".rstrip() for ln in header.splitlines()] if header else []
    lines.append(f"format = {FORMAT_VERSION}")
    current = None
    for section, key, fname in _LAYOUT:
        v = getattr(p, fname)
        if isinstance(v, tuple) and not v:
            continue  # empty lists are omitted: absent means "not given"
        if section == "cost_model.cache" and not p.cost_b_cache:
            continue
        if section == "cost_model.no_cache" and not p.cost_b_no_cache:
            continue
        if section != current:
            lines.append("")
            lines.append(f"[{section}]")
            current = section
        lines.append(f"{key} = {_toml_value(v)}")
    return "\n".join(lines) + "\n"


def save_profile(p: HardwareProfile, path: str | os.PathLike, *, header: str = "") -> Path:
    """Write ``p`` as TOML atomically (temp file in the same folder, then ``os.replace``)."""
    validate(p)
    path = Path(path)
    text = to_toml(p, header=header)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ProfileError(f"cannot write {path}: no such folder {folder}")
    return write_text_atomic(path, text)
