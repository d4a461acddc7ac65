"""The simulator checked against the world.

* :mod:`~simmoe.validation.published` — every published figure that was not
  fitted, predicted from synthetic traces (``reports/validation.md``);
* :mod:`~simmoe.validation.live` — a replay of a recorded trace against a
  live run of ``hwprobe live``, cycle by cycle (``simmoe validate``).
"""
