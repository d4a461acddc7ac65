"""Sampled speculative decoding on the tiny model: lossless in distribution, recorded, replayed, validated.

The statistical test compares the first two tokens of speculative samples with
their exact law, enumerated on the tiny model (chi-square goodness of fit at
α = 0.01; its seeds are fixed, so it is deterministic).  Its power against any
alternative at total variation 0.05 is computed, and checked by simulation, in
:func:`worst_case_power` and :func:`simulated_power` (at least 0.8 with
1,600 samples: ``test_the_sampling_test_has_power``).
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


# The law test: the joint law of the first two output tokens, binned as every pair of exact probability
# >= BIN_MASS plus one bin for the rest; chi-square goodness of fit at ALPHA_LAW with N_LAW samples.
N_LAW, ALPHA_LAW, TV, BIN_MASS = 1600, 0.01, 0.05, 0.02


def exact_pair_law(model, prompt, temperature) -> tuple[list, np.ndarray]:
    """The bins and their exact probabilities: pairs (t1, t2) with P >= BIN_MASS, then "any other pair".

    P(t1, t2) = p_T(t1 | prompt) p_T(t2 | prompt, t1), the target's softmax at T (float64) by one
    forward per first token that can reach BIN_MASS; the last bin is 1 minus the others.
    """
    import torch

    from hwprobe.sampling import target_probs
    from hwprobe.tree import lm_forward, new_cache

    def law(prefix):
        with torch.no_grad():
            logits = lm_forward(model, torch.tensor([prefix]), new_cache(model)).logits[0, -1]
        return target_probs(logits[None], temperature)[0].numpy()

    p1 = law(list(prompt))
    bins, probs = [], []
    for a in np.flatnonzero(p1 >= BIN_MASS):
        p2 = p1[a] * law([*prompt, int(a)])
        for b in np.flatnonzero(p2 >= BIN_MASS):
            bins.append((int(a), int(b)))
            probs.append(float(p2[b]))
    return bins, np.array([*probs, 1.0 - sum(probs)])


def worst_case_power(p: np.ndarray, n: int, tv: float, alpha: float) -> tuple[float, float]:
    """``(lambda, power)`` of the chi-square test of ``n`` draws against the least detectable law at ``tv``.

    Among the laws Q at total variation ``tv`` from ``p`` (on these bins), the chi-square divergence
    sum (q - p)^2 / p is smallest when Q moves mass ``tv`` from a set of bins B to its complement A,
    in proportion to p within each: then it is tv^2 (1/P(A) + 1/P(B)), minimised over the subsets A
    (all 2^k of them).  The statistic is then approximately noncentral chi-square with k - 1 degrees
    of freedom and noncentrality lambda = n tv^2 (1/P(A) + 1/P(B)) (Cohen's effect size w^2 = lambda / n),
    and the power is P(chi2'(k - 1, lambda) > the central chi2(k - 1) quantile 1 - alpha).  Any other
    law at total variation >= tv has a larger lambda, hence at least this power.
    """
    import itertools

    from scipy import stats

    k = len(p)
    masses = [p[list(a)].sum() for r in range(1, k) for a in itertools.combinations(range(k), r)]
    lam = min(n * tv ** 2 * (1 / m + 1 / (1 - m)) for m in masses)
    return lam, float(stats.ncx2.sf(stats.chi2.ppf(1 - alpha, k - 1), k - 1, lam))


def least_detectable(p: np.ndarray, tv: float) -> np.ndarray:
    """The law of :func:`worst_case_power`'s minimum: mass ``tv`` moved from B to A in proportion to p."""
    import itertools

    k = len(p)
    best = min((a for r in range(1, k) for a in itertools.combinations(range(k), r)),
               key=lambda a: 1 / p[list(a)].sum() + 1 / (1 - p[list(a)].sum()))
    inside = np.isin(np.arange(k), best)
    return p + tv * np.where(inside, p / p[inside].sum(), -p / p[~inside].sum())


def simulated_power(p: np.ndarray, n: int, tv: float, alpha: float, reps: int = 4000, seed: int = 0) -> float:
    """The rejection rate of the test on ``reps`` multinomial samples of n draws from :func:`least_detectable`."""
    from scipy import stats

    q = least_detectable(p, tv)
    counts = np.random.default_rng(seed).multinomial(n, q, size=reps)
    chi2 = ((counts - n * p) ** 2 / (n * p)).sum(axis=1)
    return float(np.mean(chi2 > stats.chi2.ppf(1 - alpha, len(p) - 1)))


def test_the_sampling_test_has_power(pair):
    """Power >= 0.8 against every law at total variation 0.05 on the bins, by computation and by simulation."""
    model, _ = pair
    bins, p = exact_pair_law(model, PROMPT, T)
    assert len(bins) >= 3 and p[-1] > 0 and abs(p.sum() - 1) < 1e-12
    lam, power = worst_case_power(p, N_LAW, TV, ALPHA_LAW)
    assert power >= 0.8, (lam, power)
    assert abs(0.5 * np.abs(least_detectable(p, TV) - p).sum() - TV) < 1e-12
    assert simulated_power(p, N_LAW, TV, ALPHA_LAW) >= 0.78            # 4,000 simulated tests agree
    assert simulated_power(p, N_LAW, 0.0, ALPHA_LAW) <= 2 * ALPHA_LAW   # and the level holds under the law itself
    assert worst_case_power(p, 150, TV, 0.001)[1] < 0.1                 # the 150-sample test this one replaces


@pytest.mark.slow(20)
def test_speculative_samples_follow_the_exact_law(pair):
    """1,600 speculative samples (independent seeds) of the first two tokens against their exact law (α = 0.01)."""
    from scipy import stats

    from hwprobe.pool import PoolSpec
    from hwprobe.sampling import key_of, speculative_sample

    model, drafter = pair
    bins, p = exact_pair_law(model, PROMPT, T)
    index = {b: i for i, b in enumerate(bins)}
    spec = PoolSpec(expand_topk=2, expand_nodes=1, depth=2, max_nodes=4)
    counts, committed = np.zeros(len(p), dtype=np.int64), []
    for seed in range(N_LAW):
        r = speculative_sample(model, drafter, PROMPT, 2, temperature=T, seed=seed, key=key_of("q"), spec=spec)
        counts[index.get(tuple(r.tokens), len(p) - 1)] += 1
        committed += r.committed
    assert np.mean(committed) > 1.2                       # the samples did speculate
    assert stats.chisquare(counts, N_LAW * p).pvalue > ALPHA_LAW


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
