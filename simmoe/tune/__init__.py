"""``simmoe tune``: the speculative configuration of a serving engine for an MoE model on given hardware.

Public API (``docs/tune.md``)::

    import simmoe
    df = simmoe.tune("qwen3-30b-a3b@h100-sxm:tp2", workload="mt_bench", engine="sglang", budget="30s")

returns a pandas DataFrame of every configuration tried (one row per
evaluation, with its rung and trace length; ``df.attrs["outcome"]`` holds the
whole :class:`~simmoe.tune.run.Outcome`: the best, the reason, the calibration).
``simmoe.tune`` is this package, callable.  Modules: :mod:`~simmoe.tune.space`
(the engines' spaces), :mod:`~simmoe.tune.evaluate` (one configuration's
prediction), :mod:`~simmoe.tune.search` (successive halving),
:mod:`~simmoe.tune.calibrate` (a measured point), :mod:`~simmoe.tune.run`,
:mod:`~simmoe.tune.output`, :mod:`~simmoe.tune.report` (``reports/tune.md``).
Every number is a prediction (on SYNTHETIC traces unless a recorded trace is
the workload; ``df.attrs["synthetic"]`` and the ``synthetic`` column say which).
"""

from __future__ import annotations

import sys
import types
from typing import Any


def tune(hardware: str, workload: str = "mt_bench", engine: str = "sglang", *, algorithm: str | None = None,
         batch: int = 1, budget: float | str = "50s", seed: int = 0, workers: int = 1,
         selections: tuple[str, ...] | None = None, measured: dict | str | None = None,
         progress=None, backend: str = "processes", address: str | None = None) -> Any:
    """Search ``engine``'s speculative configurations for ``hardware`` and ``workload``; every row a prediction.

    ``workload``: a synthetic preset's name or a trace file's path (``.parquet``);
    ``hardware`` may name the CPU-expert regime
    (``MODEL[/FORMAT]@GPU[+LINK]+CPU[~PLACEMENT]``, ``engine="llama.cpp"``),
    whose placement is then searched.
    ``budget``: seconds, or text such as ``"60s"``; ``measured``: one measured
    point (a dict or ``simmoe tune --measured``'s text: topk, steps,
    draft_tokens, accept_len, tokens_per_s, vanilla_tokens_per_s);
    ``progress(done, planned)`` is called after each evaluation; ``backend="ray"``
    evaluates on Ray (a local runtime of ``workers`` CPUs, or the cluster at
    ``address``: :mod:`simmoe.tune.ray_backend`).  Bad input
    raises :class:`simmoe.errors.SimmoeError` with one line.
    """
    import pandas as pd

    from simmoe.tune.calibrate import parse_measured
    from simmoe.tune.run import parse_budget, run_tune

    if isinstance(measured, str):
        measured = parse_measured(measured)
    elif isinstance(measured, dict):
        measured = parse_measured(",".join(f"{k}={v}" for k, v in measured.items()))
    outcome = run_tune(hardware=hardware, workload=workload, engine=engine, algorithm=algorithm, batch=batch,
                       budget_s=parse_budget(budget), seed=seed, workers=workers, selections=selections,
                       measured=measured, progress=progress, backend=backend, address=address)
    from simmoe.tune.evaluate import is_synthetic, workload_label

    df = pd.DataFrame(outcome.frame_rows())
    df.attrs["outcome"] = outcome
    df.attrs["synthetic"] = is_synthetic(outcome.setup)
    df.attrs["workload"] = workload_label(outcome.setup)
    return df


class _CallableModule(types.ModuleType):
    """``simmoe.tune(...)`` calls :func:`tune`, while ``simmoe.tune.space`` and the rest stay modules."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return tune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
