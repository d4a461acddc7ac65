"""`hwprobe live`: lossless live decoding with simmoe selectors, cache-neutral atlas, files, and the closed loop."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hwprobe_models import tiny_model

from hwprobe.cli import main

pytestmark = pytest.mark.torch


def _cost_profile_toml(path):
    """A profile with cost models, for selectors that need b_k and beta (numbers made up, as any would do)."""
    from simmoe.hardware.profile import HardwareProfile, save_profile

    b = tuple(10.0 + 2.0 * k for k in range(8))
    save_profile(HardwareProfile(name="test-cost", description="test", source="test", copy_ms=0.1,
                                 forward_ms=1.0, expert_ms=0.1, cost_b_cache=b, cost_beta_cache=0.5,
                                 cost_b_no_cache=b, cost_beta_no_cache=2.0), path)
    return path


def _session(slots=2, agreement=0.7):
    """An offloaded tiny model, and a target-derived drafter on its own unmodified copy."""
    import torch

    from hwprobe.drafters import make_drafter
    from hwprobe.offload import install_offload

    model = tiny_model(0)
    twin = tiny_model(0)
    backend = install_offload(model, slots=slots, device=torch.device("cpu"))
    drafter = make_drafter("target", target=twin, agreement=agreement, seed=1)
    return model, twin, backend, drafter


def _run(model, backend, drafter, selector_name, *, slots, n=7, prompt=(1, 50, 60, 70, 50, 60), cost=None,
         row0=0, accuracy=1.0):
    from hwprobe.live import LiveSettings, live_request, make_live_selector
    from hwprobe.pool import PoolSpec
    from simmoe.replay.route_prediction import RoutePredictor

    settings = LiveSettings(selector=selector_name, slots=slots, max_new_tokens=n, route_accuracy=accuracy)
    selector = make_live_selector(settings, cost)
    return live_request(model, backend, drafter, selector, list(prompt), index=0, request_id="q", dataset="d",
                        row0=row0, settings=settings, spec=PoolSpec(), num_experts=8, route_dtype=np.uint8,
                        predictor=RoutePredictor(8, accuracy, 0))


@pytest.mark.parametrize("name", ["ar", "eagle3", "specfit", "oracle"])
def test_live_request_is_lossless_and_counts_add_up(name, tmp_path):
    from hwprobe.specdecode import greedy_generate
    from simmoe.hardware.profile import load_profile

    model, twin, backend, drafter = _session()
    cost = load_profile(_cost_profile_toml(tmp_path / "c.toml"))
    req = _run(model, backend, drafter, name, slots=2, cost=cost)
    assert req.tokens == greedy_generate(twin, [1, 50, 60, 70, 50, 60], 7)     # independent reference
    assert sum(c.committed for c in req.cycles) == req.output_len == 7
    assert [c.position for c in req.cycles] == list(np.cumsum([0] + [c.committed for c in req.cycles])[:-1])
    assert [t for c in req.cycles for t in c.tokens] == req.tokens
    for c in req.cycles:
        assert c.committed == min(1 + c.accepted, 7 - c.position)
        assert c.verify_ms > 0 and c.draft_ms >= 0 and c.select_ms >= 0
        assert len(c.hits) == len(c.copies) == 2
        # each layer executes the union of the forward's routes: at least top-k = 2 experts, at most 8
        assert all(2 <= h + m <= 8 for h, m in zip(c.hits, c.copies))
        if name == "ar":
            assert c.selected == [] and c.drafted_levels == 0 and c.draft_ms == 0
    if name == "oracle":                                 # verifies exactly the accepted path
        assert all(c.accepted == len(c.selected) for c in req.cycles)
    if name == "eagle3":
        assert all(len(c.selected) == 7 for c in req.cycles)


def test_atlas_forward_leaves_cache_and_counters_alone():
    import torch

    from hwprobe.live import cache_bypass
    from hwprobe.tree import lm_forward, new_cache

    model, twin, backend, _ = _session(slots=3)
    ids = torch.tensor([[1, 50, 60, 70, 80, 90, 100]])
    other = torch.tensor([[1, 200, 31, 7, 250, 90, 12, 13]])     # routes to other experts too
    lm_forward(model, ids, new_cache(model))
    backend.collect()
    before = [layer.resident() for layer in backend.layers]
    with cache_bypass(model):
        bypass = lm_forward(model, other, new_cache(model)).logits
    after = [layer.resident() for layer in backend.layers]
    snap = backend.collect()
    assert before == after and snap.total_copies == 0 and snap.total_hits == 0
    offloaded = lm_forward(model, other, new_cache(model)).logits
    assert torch.equal(bypass, offloaded)                 # same arithmetic, so the same routes
    assert backend.collect().total_copies > 0             # the offloaded forward did copy: the bypass is real
    assert not any(layer.bypass for layer in backend.layers)                          # restored


def test_lossless_check_catches_a_wrong_output(monkeypatch):
    import hwprobe.live as live

    model, _, backend, drafter = _session()
    real = live.greedy_generate
    monkeypatch.setattr(live, "greedy_generate", lambda *a, **kw: [t + 1 for t in real(*a, **kw)])
    with pytest.raises(live.LosslessCheckFailed, match="differs from greedy"):
        _run(model, backend, drafter, "eagle3", slots=2, n=4)


def test_selector_errors():
    from hwprobe.cli import HwprobeError
    from hwprobe.live import LiveSettings, make_live_selector

    with pytest.raises(HwprobeError, match="unknown selector"):
        make_live_selector(LiveSettings("nope", 2), None)
    with pytest.raises(HwprobeError, match="cannot run live"):
        make_live_selector(LiveSettings("optimal", 2), None)


# -- the command and the closed loop --------------------------------------------------------------
def _prompts(path):
    path.write_text("\n".join(json.dumps({"question_id": i, "category": "math_reasoning",
                                          "turns": [f"Q{i}: add {i} and {i}."]}) for i in (1, 2)) + "\n")
    return path


MODEL = ["--config", "tiny-random", "--drafter", "target", "--agreement", "0.7", "--max-new-tokens", "6"]


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    """One recording and live runs of the same prompts: eagle3 with 3 slots (once, and in 3 passes), specfit with 0,
    and specfit with 2 slots seeing routes through the simulated predictor of accuracy 0.5."""
    d = tmp_path_factory.mktemp("loop")
    prompts = _prompts(d / "p.jsonl")
    cost = _cost_profile_toml(d / "cost.toml")
    assert main(["record", *MODEL, "--slots", "5", "--prompts", str(prompts), "--out", str(d / "t.parquet"),
                 "--quiet"]) == 0
    runs = {}
    for name, sel, slots, extra in (("eagle3", "eagle3", 3, []), ("repeated", "eagle3", 3, ["--repeats", "3"]),
                                    ("specfit", "specfit", 0, []),
                                    ("predicted", "specfit", 2, ["--route-accuracy", "0.5", "--route-seed", "3"])):
        out = d / f"{name}.jsonl"
        assert main(["live", *MODEL, "--selector", sel, "--slots", str(slots), "--hardware", str(cost),
                     "--prompts", str(prompts), "--out", str(out), "--quiet", *extra]) == 0
        runs[name] = out
    return d, prompts, runs


def test_live_file_is_complete_and_described(loop):
    from simmoe.validation.live import read_live

    d, prompts, runs = loop
    run = read_live(runs["eagle3"])
    m = run.meta
    assert m["complete"] and m["selector"] == "eagle3" and m["slots"] == 3 and m["max_new_tokens"] == 6
    assert m["prompts_sha256"] and m["drafter"] == "target" and m["device"].startswith("cpu")
    assert m["measured_profile"]["source"].startswith("measured by hwprobe")
    assert m["selection_profile"]["name"] == "test-cost"
    assert [r["output_len"] for r in run.requests] == [6, 6]
    assert not (d / "eagle3.jsonl.partial").exists()


def test_replay_matches_live_selections_exactly(loop):
    """Identical pools, identical selections: same cycles, accepted tokens and cache copies."""
    from simmoe.trace.io import read_trace
    from simmoe.validation.live import compare, fit_timing, read_live

    d, _, runs = loop
    tr = read_trace(d / "t.parquet")
    lives = [read_live(p) for p in runs.values()]
    prof = fit_timing(lives)
    for live in lives:
        v = compare(tr, live, prof)
        assert v.accepted_match, live.meta["selector"]
        assert v.errors["copies_mismatches"] == 0          # the simulator's LRU = the backend's LRU
        assert v.replay["cycles"] == v.live["cycles"]
        assert np.array_equal(v.cycles["draft_nodes_live"], v.cycles["draft_nodes_replay"])


def test_repeated_passes_make_the_same_cycles_and_keep_each_minimum(loop):
    from simmoe.validation.live import read_live

    _, _, runs = loop
    once, rep = read_live(runs["eagle3"]), read_live(runs["repeated"])
    assert rep.meta["repeats"] == 3 and once.meta["repeats"] == 1
    # every pass starts from an empty cache: the same copies and hits as the single pass, cycle for cycle
    for k in ("position", "committed", "draft_nodes", "copies", "hits"):
        assert np.array_equal(once.cycles[k], rep.cycles[k]), k
    samples = np.asarray(rep.cycles["samples_ms"])
    assert samples.shape == (rep.num_cycles, 3)
    assert np.all(rep.cycles["cycle_ms"] <= samples.min(axis=1) + 1e-9)
    assert all(len(x) == 0 for x in once.cycles["samples_ms"])


def test_validate_command_on_the_loop(loop, capsys):
    from simmoe.cli import main as simmoe_main

    d, _, runs = loop
    rc = simmoe_main(["validate", "--trace", str(d / "t.parquet"), "--live", str(runs["eagle3"]),
                      "--live", str(runs["specfit"])])
    out = capsys.readouterr().out
    assert rc == 0 and "| eagle3 | 3 |" in out and "| specfit | 0 |" in out


def test_mismatched_recording_is_refused(loop, tmp_path, capsys):
    from simmoe.cli import main as simmoe_main

    d, prompts, runs = loop
    other = tmp_path / "t.parquet"
    assert main(["record", *MODEL[:-1], "4", "--slots", "2", "--prompts", str(prompts), "--out", str(other),
                 "--quiet"]) == 0
    assert simmoe_main(["validate", "--trace", str(other), "--live", str(runs["eagle3"])]) == 2
    err = capsys.readouterr().err
    assert "output length" in err and err.count("\n") == 1


@pytest.mark.parametrize("repeats,dies_at,kept", [(1, 2, 1), (3, 4, 2)])
def test_killed_run_leaves_a_readable_partial_file(loop, tmp_path, monkeypatch, repeats, dies_at, kept):
    """Killed in request 2 of pass 1 (one request kept), or in request 2 of pass 2 (pass 1's two kept)."""
    import hwprobe.live as live
    from simmoe.errors import SimmoeError
    from simmoe.validation.live import read_live

    _, prompts, _ = loop
    real, calls = live.live_request, []

    def dies(*a, **kw):
        calls.append(1)
        if len(calls) == dies_at:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(live, "live_request", dies)
    out = tmp_path / "l.jsonl"
    assert main(["live", *MODEL, "--selector", "eagle3", "--slots", "2", "--prompts", str(prompts),
                 "--repeats", str(repeats), "--out", str(out), "--quiet"]) == 130
    assert not out.exists()
    partial = tmp_path / "l.jsonl.partial"
    run = read_live(partial, allow_partial=True)
    assert not run.complete and len(run.requests) == kept and run.num_cycles >= 1
    with pytest.raises(SimmoeError, match="incomplete"):
        read_live(partial)


@pytest.mark.parametrize("argv,message", [
    (["--selector", "nope"], "unknown selector"),
    (["--selector", "specfit"], "needs --hardware"),
    (["--selector", "optimal"], "cannot run live"),
    (["--selector", "eagle3", "--hardware", "/nonexistent/p.toml"], "no such profile"),
    (["--selector", "eagle3", "--max-new-tokens", "0"], "max-new-tokens"),
    (["--selector", "eagle3", "--repeats", "0"], "--repeats must be >= 1"),
    (["--selector", "eagle3", "--route-accuracy", "1.5"], "route accuracy"),
    # the tiny model has 2 MoE layers: a 48-layer model's profile is refused, as simmoe replay refuses it
    (["--selector", "eagle3", "--hardware", "a100-pcie-40gb"], "48-layer model but the model has 2 layers"),
    (["--selector", "eagle3", "--hardware", "qwen3-30b-a3b@a100-pcie-40gb+pcie4-x16"], "128 experts, top-8"),
])
def test_bad_input_is_one_line_and_leaves_nothing(tmp_path, capsys, argv, message):
    prompts = _prompts(tmp_path / "p.jsonl")
    out = tmp_path / "l.jsonl"
    rc = main(["live", "--config", "tiny-random", "--prompts", str(prompts), "--out", str(out), "--quiet", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1
    assert not out.exists() and not (tmp_path / "l.jsonl.partial").exists()
