"""`hwprobe live --prefetch draft` and `--timeline`: the backend's prefetches are the simulator's, copy for copy."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hwprobe.cli import main

pytestmark = pytest.mark.torch

MODEL = ["--config", "tiny-random", "--drafter", "target", "--agreement", "0.7", "--max-new-tokens", "8"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from simmoe.hardware.profile import HardwareProfile, save_profile

    d = tmp_path_factory.mktemp("live-prefetch")
    prompts = d / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"question_id": i, "category": "math_reasoning",
                                             "turns": [f"Q{i}: add {i} and {i}."]}) for i in (1, 2, 3)) + "\n")
    b = tuple(10.0 + 2.0 * k for k in range(8))
    save_profile(HardwareProfile(name="test-cost", description="test", source="test", copy_ms=0.1, forward_ms=1.0,
                                 expert_ms=0.1, cost_b_cache=b, cost_beta_cache=0.5, cost_b_no_cache=b,
                                 cost_beta_no_cache=2.0), d / "cost.toml")
    assert main(["record", *MODEL, "--slots", "5", "--prompts", str(prompts), "--out", str(d / "t.parquet"),
                 "--quiet"]) == 0
    out = {}
    for sel, slots in (("eagle3", 0), ("specfit", 3)):
        name = f"{sel}{slots}"
        assert main(["live", *MODEL, "--selector", sel, "--slots", str(slots), "--hardware", str(d / "cost.toml"),
                     "--prompts", str(prompts), "--out", str(d / f"{name}.jsonl"), "--quiet",
                     "--prefetch", "draft", "--timeline", str(d / f"{name}.json")]) == 0   # lossless check passed
        out[name] = d / f"{name}.jsonl"
    return d, out


def test_simulator_predicts_every_prefetch_and_copy(runs):
    from dataclasses import replace

    from simmoe.replay.engine import replay
    from simmoe.trace.io import read_trace
    from simmoe.validation.live import compare, fit_timing, read_live, replay_config_for

    d, out = runs
    trace = read_trace(d / "t.parquet")
    for name, path in out.items():
        live = read_live(path)
        assert live.meta["prefetch"] == "draft"
        prof = fit_timing([live])
        v = compare(trace, live, prof)
        assert v.accepted_match and v.errors["copies_mismatches"] == 0, name
        cyc = [json.loads(line) for line in path.read_text().splitlines() if '"cycle"' in line]
        res = replay(trace, replace(replay_config_for(live, prof.name), prefetch="draft"), prof, paired=False,
                     staging=int(live.meta["inflight"]))
        assert [c.get("prefetched", 0) for c in cyc] == res.cycles["prefetched"].tolist(), name
        assert [c.get("useful", 0) for c in cyc] == res.cycles["useful"].tolist(), name
        assert sum(c.get("prefetched", 0) for c in cyc) > 0
        # the copies' block is charged to drafting
        assert all(c["draft_ms"] >= c.get("prefetch_ms", 0.0) for c in cyc)


def test_measured_timeline_has_no_overlap(runs):
    from simmoe.replay.timeline import overlaps, read_timeline

    d, out = runs
    for name in out:
        doc = read_timeline(d / f"{name}.json")
        assert overlaps(doc) == []
        cats = {e.get("cat") for e in doc["traceEvents"] if e["ph"] == "X"}
        assert {"draft", "experts", "prefetch", "commit", "forward"} <= cats
        assert doc["otherData"]["prefetch"] == "draft"


def test_prefetched_expert_is_a_hit_and_outputs_do_not_change():
    import torch
    from hwprobe_models import tiny_model

    from hwprobe.offload import install_offload

    ids = torch.tensor([[1, 50, 60, 70, 50, 60]])
    ref = tiny_model(0)(ids).logits
    model = tiny_model(0)
    backend = install_offload(model, slots=0, device=torch.device("cpu"))
    backend.enable_prefetch(2)
    from hwprobe.routes import RouteRecorder

    with RouteRecorder(model) as rec:
        model(ids)
        routes = rec.pop()                      # [tokens, L, k]
    backend.collect()
    want = [(0, int(routes[-1, 0, 0])), (1, int(routes[-1, 1, 0]))]
    assert backend.prefetch(want) == 2
    assert backend.available()[0, want[0][1]] and backend.unused_prefetches() == [1, 1]
    out = model(ids).logits
    snap = backend.collect()
    assert torch.equal(out, ref)
    assert snap.prefetches == [1, 1] and snap.useful == [1, 1] and sum(snap.hits) == 2
    assert not np.any(backend.available())     # without a cache the staged experts leave with the forward
