"""Shared fixtures: small random traces (see ``tests/factories.py``).

Conventions: tests of ``solvers/`` live in ``tests/solvers``, of traces in
``tests/trace``, of the replay in ``tests/replay``, of ``hwprobe`` in
``tests/hwprobe`` (marked ``torch``; skipped when torch is absent).  Tests
slower than a few seconds are marked ``slow`` (``slow(seconds)`` for the
longest: they run first, see ``pytest_collection_modifyitems``).

Hypothesis profiles: ``ci`` (chosen when the ``CI`` environment variable is
set, as ``.ci/run`` runs): derandomized, so a CI run tries the same examples
every time and a counterexample found elsewhere is a local finding, not a
random CI failure; ``dev`` (the default elsewhere): the same budget, random,
so developers' runs keep searching; ``thorough``: five times the examples.
``HYPOTHESIS_PROFILE`` overrides the choice.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))  # tests/factories.py

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


@pytest.fixture
def small_trace():
    from factories import random_trace

    return random_trace(seed=1)


@pytest.fixture
def ar_trace():
    from factories import random_trace

    return random_trace(seed=2, pool_nodes=0)


def pytest_collection_modifyitems(config, items):
    # The slowest modules first: pytest-xdist's worksteal hands each worker a contiguous share of this order
    # and steals from the tails, so a long test collected late (the validation report's two runs) would
    # leave the other core idle at the end. A module's weight is its slowest test's, and the sort is stable:
    # a module's tests stay together, in their order, and share their module fixtures on one worker.
    weight: dict = {}
    for item in items:
        weight[item.module] = max(weight.get(item.module, 0.0), _expected_seconds(item))
    items.sort(key=lambda item: weight[item.module], reverse=True)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        skip = pytest.mark.skip(reason="needs the hwprobe extra (torch, transformers)")
        for item in items:
            if "torch" in item.keywords:
                item.add_marker(skip)


def _expected_seconds(item) -> float:
    """A test's weight in the run order: ``slow(seconds)``'s seconds, 5 for a bare ``slow``, else 0."""
    mark = item.get_closest_marker("slow")
    if mark is None:
        return 0.0
    return float(mark.args[0]) if mark.args else 5.0
