"""Fits that generate traces or replay them: above the replay, below the reports that use their results.

* :mod:`~simmoe.fitting.timing_fit` — the event model's times fitted to
  SpecFit Table 3's ms/cycle, analytically or by replaying a trace
  (``simmoe fit --trace``);
* :mod:`~simmoe.fitting.physical_fit` — the physical cost model's terms
  fitted to the figures CALIBRATION.md allows, on seeded synthetic
  workloads (``python -m simmoe.fitting.physical_fit``, which writes
  ``simmoe/hardware/data/physical_fit.toml``).

The pure fits and readers stay with the models they fit, in
:mod:`simmoe.hardware` (the NNLS of b_k and β, reading the fitted terms).
"""
