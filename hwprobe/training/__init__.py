"""Training and measurement of the embedded tiny model (``hwprobe/tiny``).

- ``corpus``: the pinned stdlib text and its held-out split;
- ``tokenizer``, ``data``, ``plans``: tokenizer, token streams, shapes and plans;
- ``train_tiny``: the training command; ``losses``, ``routing_stats``,
  ``draft_agreement``, ``report``: the evidence that it learned;
- ``bench_threads``: one vs two torch threads on this machine.

See ``docs/tiny-model.md``.
"""
