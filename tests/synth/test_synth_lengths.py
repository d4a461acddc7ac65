"""Request lengths: the published totals exactly, within the limits; the token estimate."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.errors import SimmoeError
from simmoe.synth.lengths import output_lengths
from simmoe.synth.prompts import QUESTION_WORDS, estimate_tokens, question_table


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 40), sigma=st.floats(0, 2),
       fill=st.floats(0, 1))
def test_output_lengths_hit_the_total_within_caps(seed, n, sigma, fill):
    rng = np.random.default_rng(seed)
    raw = np.exp(sigma * rng.standard_normal(n))
    cap = rng.integers(1, 500, size=n)
    total = int(n + fill * (cap.sum() - n))
    out, scale = output_lengths(raw, cap, total)
    assert out.sum() == total
    assert (out >= 1).all() and (out <= cap).all()
    assert scale >= 0


def test_impossible_total_is_a_user_error():
    with pytest.raises(SimmoeError):
        output_lengths(np.ones(3), np.array([5, 5, 5]), 16)


def test_token_estimate_reproduces_the_published_cnndm_range():
    ids, tokens = question_table("cnndm")
    assert (ids[:40] == np.arange(241, 281)).all()
    assert tokens[:40].min() == 156 and tokens[:40].max() == 1496
    gids, gtok = question_table("gsm8k")
    assert (gids == np.arange(401, 481)).all() and len(QUESTION_WORDS["gsm8k"]) == 80
    assert (np.diff(estimate_tokens([10, 100, 1000])) > 0).all()
