"""The simulator checked against the world.

* :mod:`~simmoe.validation.published` — every published figure that was not
  fitted, predicted from synthetic traces (``reports/validation.md``);
* :mod:`~simmoe.validation.live` — a replay of a recorded trace against a
  live run of ``hwprobe live``, cycle by cycle (``simmoe validate``);
* :mod:`~simmoe.validation.lookahead` — Lookahead's Mat on synthetic traces
  whose acceptance is counted on a live lookahead run's text, against that
  run (``python -m hwprobe.lookahead_check``).
"""
