"""The replay: a trace, a selector, a cache and a hardware profile → per-cycle records.

Stage three of the data flow (``docs/architecture.md``).  Modules, in the
order a cycle meets them:

* :mod:`~simmoe.replay.route_prediction` — what a selector knows of the
  routes: exact, or a predictor of accuracy a (SpecFit §4.6);
* :mod:`~simmoe.replay.selectors` — the selector registry (ar, eagle3,
  evict, specfit, …);
* :mod:`~simmoe.replay.caches` — per-layer expert caches and their policies;
* :mod:`~simmoe.replay.timing` — the event model of a forward (simpy
  reference and exact recurrence), drafting, commit;
* :mod:`~simmoe.replay.engine` — the replay loop: plan, then simulate;
* :mod:`~simmoe.replay.metrics` — the paper's counters (Eq. 10).
"""
