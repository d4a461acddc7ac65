"""Does a hardware profile describe a trace's model?  One check, shared by every command.

A profile's times (the non-expert forward, copies per layer, b_k) belong to
one model.  A physical profile ``MODEL@GPU[...]`` knows its model's whole
geometry.  A TOML profile states ``num_layers`` and names its ``model``, whose
experts and top-k the catalogue gives when the model is catalogued;
``num_layers = 0`` means the profile states no geometry at all (a profile
written for tests or for any model), and nothing is checked.  Everything a
profile states must agree with the trace's geometry (layers with routed
experts, experts per layer, top-k).  ``simmoe replay``, ``sweep``, ``bound``, ``validate``,
``fit --trace``, ``tune --trace``, ``report`` (every trace against every profile that times it:
the base, Table 4's, the regime table's resident one; :mod:`simmoe.report.experiments`),
``python -m simmoe.report.caches`` and the default profile that follows a trace
(:mod:`simmoe.cli.defaults`) all ask :func:`geometry_problem` / :func:`check_profile_model`.
"""

from __future__ import annotations

from simmoe.errors import ProfileError


def profile_model(profile):
    """The catalogue :class:`~simmoe.hardware.catalogue.ModelSpec` a profile describes, or None when unknown."""
    phys = getattr(profile, "physical", None)
    if phys is not None:
        return phys.model
    name = str(getattr(profile, "model", "") or "")
    if not name.strip() or name.endswith(".toml"):
        return None
    from simmoe.hardware.catalogue import CatalogueError, load_model

    try:
        return load_model(name)
    except CatalogueError:      # a model outside the catalogue (hwprobe's tiny model): its layers still count
        return None


def geometry_problem(geometry, profile, name: str) -> str | None:
    """Why ``profile`` (called ``name``) cannot time a trace of ``geometry`` (one sentence), or None."""
    have = (int(geometry.num_experts), int(geometry.top_k))
    want = int(getattr(profile, "num_layers", 0) or 0)
    physical = getattr(profile, "physical", None) is not None
    if not (physical or want):      # no geometry stated: the profile claims no model
        return None
    model = profile_model(profile)
    routes = None if model is None else (model.trace_experts, model.trace_top_k)
    # a physical profile is its model: its routing is reported first
    if physical and routes != have:
        return _routing(name, model, have, "name the trace's model in the profile (simmoe models)")
    if want and want != int(geometry.num_layers):
        return (f"profile {name} describes a {want}-layer model but the trace has {int(geometry.num_layers)} "
                "layers; use a profile of this model (simmoe fit or hwprobe calibrate)")
    if routes is not None and routes != have:
        return _routing(name, model, have, "use a profile of the trace's model (simmoe fit, hwprobe calibrate, "
                                           "or MODEL@GPU from simmoe models)")
    return None


def _routing(name: str, model, have: tuple[int, int], fix: str) -> str:
    return (f"profile {name} is {model.name} ({model.trace_experts} experts, top-{model.trace_top_k}) but the "
            f"trace routes to {have[0]} experts, top-{have[1]}; {fix}")


def check_profile_model(geometry, profile, name: str) -> None:
    """:class:`ProfileError` (one line, exit 2) when ``profile`` describes another model than ``geometry``."""
    problem = geometry_problem(geometry, profile, name)
    if problem is not None:
        raise ProfileError(problem)
