"""The simulator's Lookahead against the live lookahead on the trained tiny model, on the same prompts."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.torch

BRANCHES, LENGTH, K = 4, 6, 16


@pytest.fixture(scope="module")
def tiny_target():
    from hwprobe.models import load_target

    return load_target("tiny", quiet=True)


@pytest.fixture(scope="module")
def prompts():
    import hwprobe.data
    from hwprobe.prompts import read_prompts

    return read_prompts(Path(hwprobe.data.__file__).parent / "spec_bench_question.jsonl", limit=4)


def test_lookahead_pools_are_branches_of_chains(tiny_target, prompts):
    """The live drafter grows the simulator's Lookahead shape: siblings only at the root, then chains."""
    from hwprobe.drafters.ngram import LookaheadDrafter, lookahead_spec
    from hwprobe.pool import build_pool

    ids = tiny_target.tokenizer.encode_prompt(prompts[0].text)
    pool = build_pool(LookaheadDrafter(), ids + ids[:8], lookahead_spec(BRANCHES, LENGTH))   # its root repeats
    roots = [j for j in range(len(pool)) if pool.parent[j] < 0]
    assert 1 <= len(roots) <= BRANCHES and len(pool) <= BRANCHES * LENGTH
    children = {j: [k for k in range(len(pool)) if pool.parent[k] == j] for j in range(len(pool))}
    assert all(len(c) <= 1 for c in children.values())
    assert [pool.q[j] for j in roots] == sorted((pool.q[j] for j in roots), reverse=True)


def test_simulated_mat_within_ten_percent_of_live(tiny_target, prompts):
    """Rates counted on the live run's text (not fitted to its acceptance) predict its Mat within 10 %."""
    from hwprobe.lookahead_check import run

    cmp = run(tiny_target.model, tiny_target.tokenizer, prompts, max_new_tokens=48, branches=BRANCHES,
              branch_length=LENGTH, draft_tokens=K, replicas=16, check=False, workloads=("text",))
    c = cmp.counts
    assert c.positions == sum(47 for _ in prompts)      # every output position with a next token
    assert 0 < c.hits < c.positions and cmp.live_cycles < c.positions
    assert cmp.simulated.params["hit"] == pytest.approx(c.hits / c.positions)
    assert abs(cmp.error) <= 0.10, (cmp.live_mat, cmp.simulated.mat)
