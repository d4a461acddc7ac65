"""Defaults that follow the trace: the hardware profile a command uses when ``--hardware`` is not given.

The default profile (``a100-pcie-40gb``, fitted to SpecFit's A100 figures for
Qwen3-30B-A3B) serves traces of its model whose pools need no intercept past
its b_0..b_7.  For any other trace (another geometry; EVICT's pools, K = 32)
the default becomes the physical offload counterpart of the trace's model on
the same GPU and link (``MODEL@a100-pcie-40gb+pcie4-x16``, which derives b_k
for any k), and the command says so in one line.  A trace whose model is not
in the catalogue gets one line naming the fix.  An explicit ``--hardware`` is
never replaced.
"""

from __future__ import annotations

from dataclasses import replace

from simmoe.errors import SimmoeError


def default_profile_name() -> str:
    from simmoe.replay.engine import DEFAULT_PROFILE

    return DEFAULT_PROFILE


def serving_problem(trace, profile, name: str) -> str | None:
    """Why ``profile`` cannot serve ``trace`` (a short clause), or None when it can.

    Decided by the trace alone, so that every selector of a run (and of
    another run on the same trace) sees the same profile: the model's
    geometry (:mod:`simmoe.hardware.model_check`, every command's check), and intercepts b_0..b_K for the
    trace's K (SpecFit Eq. 4 prices subtrees of up to K nodes), with the
    cache and without.
    """
    from simmoe.hardware.model_check import geometry_problem

    g = trace.geometry
    if geometry_problem(g, profile, name) is not None:
        return (f"{name} describes another model than the trace's ({g.name or 'unnamed'}: {g.num_layers} layers "
                f"x {g.num_experts} experts, top-{g.top_k})")
    K = trace.pool_shape.K
    have = min(len(profile.cost_model(cache).b) for cache in (True, False))
    if have < K + 1:
        return f"{name}'s b_k stop at b_{have - 1} and the trace's pools (K = {K}) need b_{K}"
    return None


def counterpart_for(trace, profile) -> str:
    """``MODEL@GPU+LINK``: the trace's catalogued model on the default profile's GPU and link.

    :class:`SimmoeError` (one line naming the fix) when the trace's model is
    not in the catalogue.
    """
    from simmoe.hardware.catalogue import model_for_geometry
    from simmoe.hardware.physical import counterpart_name

    g = trace.geometry
    model = model_for_geometry(g)
    if model is None:
        raise SimmoeError(
            f"the trace's model ({g.name or 'unnamed'}: {g.num_layers} layers x {g.num_experts} experts, "
            f"top-{g.top_k}) is not in the catalogue, so no default profile fits it: give --hardware PROFILE "
            "(a .toml from hwprobe calibrate or simmoe fit), or --hardware GEOMETRY.toml@a100-pcie-40gb+pcie4-x16 "
            "with the model's geometry (docs/models-and-gpus.md)")
    own = counterpart_name(profile) or "qwen3-30b-a3b@a100-pcie-40gb+pcie4-x16"
    return f"{model.key}@{own.split('@', 1)[1]}"


def profile_for_trace(trace, *, say=None):
    """``(name, profile)`` for a command run without ``--hardware`` on ``trace``.

    The default profile when it serves the trace (:func:`serving_problem`);
    otherwise the physical counterpart of the trace's model, announced
    through ``say`` in one line.
    """
    from simmoe.hardware.profile import load_profile

    name = default_profile_name()
    profile = load_profile(name)
    problem = serving_problem(trace, profile, name)
    if problem is None:
        return name, profile
    from simmoe.hardware.model_check import check_profile_model

    alt = counterpart_for(trace, profile)
    counterpart = load_profile(alt)
    check_profile_model(trace.geometry, counterpart, alt)   # a trace named after a model it does not match
    if say is not None:
        say(f"no --hardware given; {problem}: using {alt} (the trace's model on the same GPU and link)")
    return alt, counterpart


def follow_trace(profile, trace, base, *, say):
    """``simmoe replay``: ``(profile, base)`` with ``base.hardware`` the profile used.

    ``profile`` None means ``--hardware`` was not given: the profile follows
    the trace (:func:`profile_for_trace`); a given profile is kept as it is.
    """
    if profile is not None:
        return profile, base
    name, profile = profile_for_trace(trace, say=say)
    return profile, replace(base, hardware=name)
