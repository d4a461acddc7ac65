"""What-if hardware: profiles derived from a base profile by changing the host-to-device link.

The copy time per expert is the expert's bytes over the link's bandwidth
(``shared/design/CALIBRATION.md``, "Physical limits": 9,437,184 B take
≈ 0.38 ms at 24.8 GB/s, PCIe Gen4 x16; ≈ 0.17 ms at 55 GB/s, Gen5;
≈ 25 µs at ≈ 375 GB/s, NVLink-C2C).  A derived profile keeps everything
else of the base (compute, drafting, overheads) and sets

    copy_ms = c · expert_bytes / bandwidth      (c copies share the link)

so that the copy engine moves one expert per ``expert_bytes / bandwidth``.

The selectors' predictive cost model (Eq. 4, App. B) must follow the
hardware, or a cost-aware selector would plan for the wrong link.  β is the
marginal time of one more unique expert.  Without the cache every unique
expert is copied, and with copies overlapping compute the slower of the copy
engine (x = copy time per expert) and the expert's compute e sets it, so
β_no_cache is scaled by max(x_new, e) / max(x_old, e).  With the cache most
experts hit and β_cache (0.21 ms on the A100, below e) is mostly compute;
a faster link cannot make a cached expert dearer than an uncached one, so
β_cache = min(β_cache, β_no_cache_new).  The intercepts b_k
(expert-independent time) are kept.  This is an approximation, stated in the
report; a measured profile (``hwprobe calibrate``) replaces it on real
hardware.  EVICT's C(k) is kept
as it is (the report does not run ``evict`` on derived profiles).
"""

from __future__ import annotations

from dataclasses import dataclass

from simmoe.errors import ProfileError

# (label, GB/s) of the links in CALIBRATION.md "Physical limits"
LINKS: tuple[tuple[str, float], ...] = (
    ("PCIe Gen4 x16", 24.8),
    ("PCIe Gen5 x16", 55.0),
    ("NVLink-C2C", 375.0),
)


@dataclass(frozen=True)
class Link:
    """A host-to-device link of the what-if: its label and bandwidth (GB/s, 1e9 B/s)."""

    label: str
    gbps: float


def copy_ms_per_expert(expert_bytes: int, gbps: float) -> float:
    """Time to move one expert over a link of ``gbps`` GB/s, in ms."""
    if gbps <= 0:
        raise ProfileError(f"link bandwidth must be > 0 GB/s, got {gbps!r}")
    return expert_bytes / (gbps * 1e9) * 1e3


def bandwidth_profile(base, gbps: float, label: str = ""):
    """``base`` with its host-to-device link replaced by one of ``gbps`` GB/s (see module doc).

    The name is ``<base>@<gbps>GBps``.  Raises :class:`ProfileError` when the
    base is resident (nothing to copy) or does not give ``expert_bytes``.
    O(1).
    """
    if base.resident:
        raise ProfileError(f"profile {base.name}: experts are resident; a link what-if needs an offload profile")
    if base.expert_bytes <= 0:
        raise ProfileError(f"profile {base.name}: field 'expert_bytes' is needed to derive copy times from bandwidth")
    x_new = copy_ms_per_expert(base.expert_bytes, gbps)
    x_old = base.effective_copy_ms
    e = base.expert_ms
    scale = max(x_new, e) / max(x_old, e) if max(x_old, e) > 0 else 1.0
    name = f"{base.name}@{gbps:g}GBps"
    what = f"{label} ({gbps:g} GB/s)" if label else f"{gbps:g} GB/s"
    return base.replace(
        name=name,
        description=f"{base.description}; link replaced by {what}",
        source=(f"derived from {base.name} ({base.source}): copy time per expert = "
                f"{base.expert_bytes} B / {gbps:g} GB/s = {x_new:.4g} ms; cost-model beta "
                f"without cache scaled by {scale:.4g}, with cache capped by it"),
        copy_ms=x_new * base.copies_in_flight,
        copy_cv=0.0,
        copy_samples_ms=(),
        link_gbps=float(gbps),
        cost_beta_cache=min(base.cost_beta_cache, base.cost_beta_no_cache * scale),
        cost_beta_no_cache=base.cost_beta_no_cache * scale,
        path=None,
    )
