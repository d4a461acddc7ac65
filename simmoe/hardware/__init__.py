"""Hardware profiles and the fitting of their cost models.

* :mod:`~simmoe.hardware.profile` — a profile (timing parameters of one GPU,
  host link and model; the selectors' cost models) read from and written to
  TOML; shipped profiles in ``simmoe/hardware/profiles/``;
* :mod:`~simmoe.hardware.costfit` — NNLS refit of SpecFit's b_k and β
  (App. B) from probe measurements (``simmoe fit --probes``);
* :mod:`~simmoe.hardware.physical` — the physical cost model of a forward
  (geometry × GPU × link), which reads its fitted terms from
  ``data/physical_fit.toml``.

The fits that generate traces or run replays (the event model's times, the
physical model's terms) sit above the replay, in :mod:`simmoe.fitting`.

The profile API is importable from here as well.
"""

from simmoe.hardware.profile import PROFILE_DIR, HardwareProfile, list_profiles, load_profile, save_profile

__all__ = ["PROFILE_DIR", "HardwareProfile", "list_profiles", "load_profile", "save_profile"]
