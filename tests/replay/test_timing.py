"""The event model: simpy reference, exact recurrence and closed form agree where they must."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.errors import SimmoeError
from simmoe.hardware.profile import HardwareProfile, load_profile
from simmoe.replay.timing import (
    CycleTimer,
    closed_forward,
    drawn_copy_forward,
    fixed_copy_forward,
    simpy_forward,
)

# times as exact binary fractions: every sum is exact, so equalities are bit-exact
eighths = st.integers(0, 24).map(lambda k: k / 8)


@st.composite
def layers(draw, max_layers=4, max_count=10):
    L = draw(st.integers(1, max_layers))
    h = np.array(draw(st.lists(st.integers(0, max_count), min_size=L, max_size=L)))
    m = np.array(draw(st.lists(st.integers(0, max_count), min_size=L, max_size=L)))
    return h, m


def profile(**kw) -> HardwareProfile:
    base = dict(name="test", description="test", source="test", copies_in_flight=2, copy_ms=0.8,
                forward_ms=30.0, expert_ms=0.2, draft_level_ms=9.0, draft_fixed_ms=1.0, commit_ms=0.5)
    base.update(kw)
    return HardwareProfile(**base)


@given(layers(), eighths, eighths, eighths, st.integers(1, 4), st.booleans())
def test_recurrence_equals_simpy_exactly_with_fixed_copies(hm, a, e, x, c, overlap):
    h, m = hm
    ref = simpy_forward(a, h, m, e, x, c, overlap)
    assert fixed_copy_forward(a, h, m, e, x, c, overlap) == ref
    assert drawn_copy_forward(a, h, m, e, np.full(int(m.sum()), x), c, overlap) == ref


@given(layers(), eighths, eighths, st.integers(1, 4), st.booleans(), st.data())
def test_recurrence_equals_simpy_exactly_with_drawn_copies(hm, a, e, c, overlap, data):
    h, m = hm
    copies = np.array(data.draw(st.lists(st.integers(1, 40), min_size=int(m.sum()), max_size=int(m.sum())))) / 8
    assert drawn_copy_forward(a, h, m, e, copies, c, overlap) == simpy_forward(a, h, m, e, 0.0, c, overlap, copies)


@settings(max_examples=30)
@given(layers(max_layers=6, max_count=14), st.floats(0.1, 3.0), st.integers(1, 3),
       st.floats(0.05, 1.0), st.integers(0, 1000))
def test_timer_models_agree_with_gamma_copy_times(hm, copy_ms, c, cv, seed):
    h, m = hm
    p = profile(copy_ms=copy_ms, copies_in_flight=c, copy_cv=cv, forward_ms=7.3, expert_ms=0.217)
    sim, rec = CycleTimer(p, model="simpy", seed=seed), CycleTimer(p, model="event", seed=seed)
    for _ in range(3):  # the random streams stay in step across forwards
        assert math.isclose(rec.forward_ms(3, h, m), sim.forward_ms(3, h, m), rel_tol=1e-12, abs_tol=1e-12)


@given(layers(), eighths, eighths, eighths, st.integers(1, 4))
def test_without_overlap_all_three_equal_the_closed_form(hm, a, e, x, c):
    h, m = hm
    closed = closed_forward(a, h, m, e, x, c)
    assert simpy_forward(a, h, m, e, x, c, overlap=False) == closed
    assert fixed_copy_forward(a, h, m, e, x, c, overlap=False) == closed
    # c = 1 written out: attention, every copy in turn, then every expert
    if c == 1:
        assert closed == sum(a + mm * x + (hh + mm) * e for hh, mm in zip(h, m))


@given(layers(), eighths, eighths, st.integers(1, 4), st.booleans())
def test_zero_copy_time_equals_the_closed_form(hm, a, e, c, overlap):
    h, m = hm
    closed = closed_forward(a, h, m, e, 0.0, c)
    assert closed == sum(a + (hh + mm) * e for hh, mm in zip(h, m))
    assert simpy_forward(a, h, m, e, 0.0, c, overlap) == closed
    assert fixed_copy_forward(a, h, m, e, 0.0, c, overlap) == closed


@given(layers(max_count=30), st.floats(0, 5), st.floats(0, 1), st.floats(0, 3), st.integers(1, 4))
def test_overlap_lies_between_its_bounds(hm, a, e, x, c):
    h, m = hm
    t = fixed_copy_forward(a, h, m, e, x, c)
    upper = closed_forward(a, h, m, e, x, c)
    # compute stream busy all along, or the copy engine then the last expert
    lower = sum(a + max((hh + mm) * e, (-(-mm // c)) * x + e if mm else 0.0) for hh, mm in zip(h, m))
    assert lower * (1 - 1e-12) <= t <= upper * (1 + 1e-12) + 1e-12
    # physical limit: misses × copy time over the copy engines
    assert t >= m.sum() * x / c * (1 - 1e-12)


@given(layers(max_count=20), st.floats(0, 5), st.floats(0, 1), st.floats(0, 3), st.integers(1, 4), st.data())
def test_a_hit_turned_miss_never_saves_time(hm, a, e, x, c, data):
    h, m = hm
    layer = data.draw(st.integers(0, len(h) - 1))
    if h[layer] == 0:
        return
    h2, m2 = h.copy(), m.copy()
    h2[layer] -= 1
    m2[layer] += 1
    assert fixed_copy_forward(a, h2, m2, e, x, c) >= fixed_copy_forward(a, h, m, e, x, c) - 1e-9


def test_worked_example_two_copies_in_flight():
    # a = 1; hits 1 (e = 1); misses 3, x = 4, c = 2: copies land at 5, 5, 9;
    # compute: hit 1..2, misses 5..6, 6..7, 9..10 → layer ends at 10
    assert simpy_forward(1.0, [1], [3], 1.0, 4.0, 2) == 10.0
    assert fixed_copy_forward(1.0, [1], [3], 1.0, 4.0, 2) == 10.0
    assert closed_forward(1.0, [1], [3], 1.0, 4.0, 2) == 1 + 4 + 8


def test_cycle_parts():
    p = profile(token_ms=0.5, prefill_token_ms=0.1, cache_overhead_ms=4.0, selector_ms=2.5)
    t = CycleTimer(p, cache=False)
    zero = np.zeros(4, int)
    assert t.forward_ms(1, zero, zero) == pytest.approx(30.0)
    assert t.forward_ms(5, zero, zero) == pytest.approx(32.0)
    assert t.prefill_ms(100, zero, zero) == pytest.approx(40.0)
    assert CycleTimer(p, cache=True).forward_ms(1, zero, zero) == pytest.approx(34.0)
    assert t.draft_ms(0) == 0.0 and t.draft_ms(3) == pytest.approx(28.0)
    assert t.commit_ms() == 0.5 and t.selector_ms() == 2.5


def test_closed_model_ignores_overlap_and_event_model_uses_it():
    p = profile()
    h, m = np.full(48, 20), np.full(48, 8)
    closed = CycleTimer(p, model="closed").forward_ms(1, h, m)
    event = CycleTimer(p, model="event").forward_ms(1, h, m)
    assert closed == pytest.approx(30 + 48 * (28 * 0.2 + 4 * 0.8))
    assert event == pytest.approx(30 + 48 * 28 * 0.2)  # copies hidden behind 20 hits
    no_overlap = CycleTimer(p.replace(overlap=False), model="event").forward_ms(1, h, m)
    assert no_overlap == pytest.approx(closed)


def test_copy_samples_are_drawn_from_the_measured_values():
    p = profile(copy_samples_ms=(1.0, 2.0), copies_in_flight=1, expert_ms=0.0, forward_ms=0.0)
    t = CycleTimer(p, seed=5)
    times = {t.forward_ms(1, [0], [1]) for _ in range(50)}
    assert times == {1.0, 2.0}


def test_resident_profile_has_no_copy_time():
    p = load_profile("a100-sxm-resident")
    h, m = np.full(48, 3), np.full(48, 9)
    t = {model: CycleTimer(p, model=model).forward_ms(2, h, m) for model in ("event", "simpy", "closed")}
    assert t["event"] == pytest.approx(t["closed"]) == pytest.approx(t["simpy"])
    assert t["closed"] == pytest.approx(p.forward_ms + 48 * 12 * p.expert_ms)


@pytest.mark.parametrize("name", ["a100-pcie-40gb", "rtx4090-24gb"])
def test_shipped_profiles_agree_across_models(name):
    p = load_profile(name)
    rng = np.random.default_rng(0)
    h, m = rng.integers(0, 25, 48), rng.integers(0, 12, 48)
    for cache in (False, True):
        ev = CycleTimer(p, model="event", cache=cache).forward_ms(8, h, m)
        sp = CycleTimer(p, model="simpy", cache=cache).forward_ms(8, h, m)
        assert ev == pytest.approx(sp, rel=1e-12)
        assert ev <= CycleTimer(p, model="closed", cache=cache).forward_ms(8, h, m)


def test_errors():
    with pytest.raises(SimmoeError, match="timing model"):
        CycleTimer(profile(), model="fast")
    with pytest.raises(SimmoeError, match="per-layer"):
        CycleTimer(profile()).forward_ms(1, np.zeros(3, int), np.zeros(4, int))
    with pytest.raises(SimmoeError, match="cache=True or False"):
        CycleTimer(profile(cache_overhead_ms=1.0))


@given(layers(max_count=20), st.integers(0, 64), eighths, eighths, st.integers(1, 4), st.booleans())
def test_timer_table_path_equals_simpy_exactly(hm, fwd, e, x, c, overlap):
    h, m = hm
    # forward_ms = L × a with a a binary fraction: the per-layer split stays exact
    p = profile(forward_ms=len(h) * fwd / 8, expert_ms=e, copy_ms=x, copies_in_flight=c, overlap=overlap)
    event = CycleTimer(p, model="event")
    assert event.forward_ms(1, h, m) == CycleTimer(p, model="simpy").forward_ms(1, h, m)
    assert event.forward_ms(1, h, m) == event.forward_ms(1, h, m)  # the grown table is reused


def test_negative_counts_are_rejected():
    with pytest.raises(SimmoeError, match=">= 0"):
        CycleTimer(profile()).forward_ms(1, np.array([1, -1]), np.array([0, 0]))
