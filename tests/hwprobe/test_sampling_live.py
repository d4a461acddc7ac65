"""Sampled speculative decoding on the tiny model: lossless in distribution, recorded, replayed, validated.

The statistical test compares output distributions with and without
speculation by a chi-square test of homogeneity that rejects at p < 0.001;
its seeds are fixed, so it is deterministic.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hwprobe_models import tiny_model

pytestmark = pytest.mark.torch

PROMPT = [1, 50, 60, 70, 50, 60]
T = 0.05          # the tiny random model's logits spread 0.16: at 0.05 its top token holds 10–60%
ALPHA = 1e-3


@pytest.fixture(scope="module")
def pair():
    import torch

    from hwprobe.drafters import make_drafter

    torch.set_num_threads(1)
    model, twin = tiny_model(0), tiny_model(0)
    return model, make_drafter("target", target=twin, agreement=0.9, seed=1)


def test_speculation_draws_the_same_tokens_as_plain_sampling(pair):
    from hwprobe.sampling import key_of, sampled_generate, speculative_sample
    from hwprobe.specdecode import select_all, select_top_k

    model, drafter = pair
    accepted = 0
    for seed in range(3):
        plain = sampled_generate(model, PROMPT, 6, T, seed, key_of("q"))
        for rule in (select_all, select_top_k(3)):
            spec = speculative_sample(model, drafter, PROMPT, 6, temperature=T, seed=seed, key=key_of("q"),
                                      select=rule)
            assert spec.tokens == plain
            accepted += sum(c - 1 for c in spec.committed)
    assert accepted > 0                       # speculation did accept drafted tokens


def test_plain_sampler_draws_the_softmax():
    """Goodness of fit of the first token over many request keys against softmax(logits / T) (α = 0.001)."""
    import torch
    from scipy import stats

    from hwprobe.sampling import sample_token, target_probs
    from hwprobe.tree import lm_forward, new_cache

    model = tiny_model(0)
    logits = lm_forward(model, torch.tensor([PROMPT]), new_cache(model)).logits[0, -1]
    p = target_probs(logits[None], 1.0)[0].numpy()
    n = 4000
    draws = [sample_token(logits, 1.0, 7, k, 0) for k in range(n)]
    top = np.argsort(-p)[:12]
    obs = [sum(d == t for d in draws) for t in top] + [sum(d not in set(top.tolist()) for d in draws)]
    exp = [n * p[t] for t in top] + [n * (1 - p[top].sum())]
    assert stats.chisquare(obs, exp).pvalue > ALPHA


@pytest.mark.slow
def test_output_distribution_with_and_without_speculation(pair):
    """Independent seeds: the first three output tokens of 150 speculative and 150 plain samples (α = 0.001)."""
    from scipy import stats

    from hwprobe.pool import PoolSpec
    from hwprobe.sampling import key_of, sampled_generate, speculative_sample

    model, drafter = pair
    spec = PoolSpec(expand_topk=2, expand_nodes=1, depth=2, max_nodes=4)
    n = 150
    with_spec, committed = [], []
    for seed in range(n):
        r = speculative_sample(model, drafter, PROMPT, 3, temperature=T, seed=seed, key=key_of("q"), spec=spec)
        with_spec.append(tuple(r.tokens))
        committed += r.committed
    without = [tuple(sampled_generate(model, PROMPT, 3, T, 10_000 + seed, key_of("q"))) for seed in range(n)]
    assert np.mean(committed) > 1.2                       # the speculative side did speculate
    cats = sorted(set(with_spec) | set(without))
    a = np.array([[with_spec.count(c) for c in cats], [without.count(c) for c in cats]])
    big = a.sum(axis=0) >= 10                             # rare outcomes pooled into one column
    table = np.column_stack([a[:, big], a[:, ~big].sum(axis=1)]) if (~big).any() else a[:, big]
    assert stats.chi2_contingency(table).pvalue > ALPHA


def test_live_request_at_temperature_is_checked_and_consistent():
    import torch

    from hwprobe.drafters import make_drafter
    from hwprobe.live import LiveSettings, live_request, make_live_selector
    from hwprobe.offload import install_offload
    from hwprobe.pool import PoolSpec
    from hwprobe.sampling import key_of, sampled_generate
    from simmoe.replay.route_prediction import RoutePredictor

    model, twin = tiny_model(0), tiny_model(0)
    backend = install_offload(model, slots=2, device=torch.device("cpu"))
    drafter = make_drafter("target", target=twin, agreement=0.9, seed=1)
    settings = LiveSettings(selector="eagle3", slots=2, max_new_tokens=7, temperature=T, sampling_seed=4)
    req = live_request(model, backend, drafter, make_live_selector(settings, None), list(PROMPT), index=0,
                       request_id="q", dataset="d", row0=0, settings=settings, spec=PoolSpec(), num_experts=8,
                       route_dtype=np.uint8, predictor=RoutePredictor(8, 1.0, 0))
    assert req.tokens == sampled_generate(twin, PROMPT, 7, T, 4, key_of("q"))
    assert [t for c in req.cycles for t in c.tokens] == req.tokens


def _prompts(path):
    path.write_text("\n".join(json.dumps({"question_id": i, "category": "math_reasoning",
                                          "turns": [f"Q{i}: add {i} and {i}."]}) for i in (1, 2)) + "\n")
    return path


@pytest.mark.slow
def test_record_live_and_validate_at_temperature(tmp_path, capsys):
    """hwprobe record and hwprobe live at T = 0.5 with one seed; the replay repeats every live cycle."""
    from hwprobe.cli import main
    from simmoe.cli import main as simmoe_main
    from simmoe.trace.io import read_trace

    prompts = _prompts(tmp_path / "p.jsonl")
    model = ["--config", "tiny-random", "--drafter", "target", "--agreement", "0.9", "--max-new-tokens", "6",
             "--temperature", "0.5", "--sampling-seed", "3"]
    assert main(["record", *model, "--slots", "5", "--prompts", str(prompts), "--out",
                 str(tmp_path / "t.parquet"), "--quiet"]) == 0
    tr = read_trace(tmp_path / "t.parquet")
    assert tr.meta["sampling"] == {"temperature": 0.5, "seed": 3, "text": "sampled"}
    assert tr.node_target_cdf is not None
    assert main(["live", *model, "--selector", "eagle3", "--slots", "3", "--prompts", str(prompts),
                 "--out", str(tmp_path / "l.jsonl"), "--quiet"]) == 0
    capsys.readouterr()
    assert simmoe_main(["validate", "--trace", str(tmp_path / "t.parquet"), "--live", str(tmp_path / "l.jsonl"),
                        "--json", str(tmp_path / "v.json")]) == 0
    doc = json.loads((tmp_path / "v.json").read_text())
    assert doc["runs"] and all(r["accepted_mismatches"] == 0 for r in doc["runs"])
    # a greedy replay of the sampled text is refused in one line
    assert simmoe_main(["replay", str(tmp_path / "t.parquet"), "--no-progress"]) == 2
    assert "sampled" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_bad_temperature_is_one_line_exit_2(tmp_path, capsys, value):
    from hwprobe.cli import main

    prompts = _prompts(tmp_path / "p.jsonl")
    assert main(["record", "--config", "tiny-random", "--prompts", str(prompts), "--temperature", value,
                 "--out", str(tmp_path / "t.parquet"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--temperature" in err
