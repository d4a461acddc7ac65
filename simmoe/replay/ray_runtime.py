"""Ray for the commands that spread replays over a cluster (``simmoe sweep --engine ray``, ``simmoe tune
--backend ray``): importing it with a one-line refusal, and starting or joining a runtime.

Ray is an optional extra (``pip install 'simmoe[ray]'``).
"""

from __future__ import annotations

from simmoe.errors import SimmoeError


def require_ray(flag: str = "--engine ray"):
    """Import ray, or raise :class:`SimmoeError` saying how to install it (``flag``: what asked for it)."""
    try:
        import ray
    except ImportError:
        raise SimmoeError(f"{flag} needs Ray: pip install 'ray>=2.9' "
                          "(or the extra: pip install 'simmoe[ray]')") from None
    return ray


def start_ray(ray, address: str | None = None, num_cpus: int | None = None) -> bool:
    """Start a local runtime (``num_cpus`` workers) or join the cluster at ``address``, unless one is running;
    True when this call started or joined it (and so should shut it down).  One line when that fails."""
    if ray.is_initialized():
        return False
    try:
        if address is None:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise SimmoeError(f"cannot start or reach the Ray cluster{f' at {address}' if address else ''}: {exc}") \
            from None
    return True
