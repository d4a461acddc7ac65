"""`simmoe tune --engine llama.cpp` with experts on the CPU, and `--workload TRACE`."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import simmoe
from simmoe.cli import main
from simmoe.errors import SimmoeError
from simmoe.hardware.cpu_profile import build_cpu_forward, memory_use
from simmoe.tune import cpu as tc
from simmoe.tune import space as sp
from simmoe.tune.evaluate import Setup, profile_of, replay_config

BASE = "qwen3-30b-a3b/q4_k_m@rtx2080+i9-10900x"
GIB, MIB = 2.0 ** 30, 2.0 ** 20


def _gpu_part_fits(base: str, n: int) -> bool:
    """Brute force, independent of the profile's check: the GPU's part of cpu-layers:n within GPU memory."""
    fwd = build_cpu_forward(f"{base}~cpu-all")       # every layer's experts on the CPU: always fits here
    moe = fwd.model.moe_layers
    experts = fwd.E * fwd.N
    on_gpu = float(fwd.w_bytes.sum() + fwd.head_bytes) + sum(float(experts[i]) for i, layer in enumerate(moe)
                                                              if layer >= n)
    host = sum(float(experts[i]) for i, layer in enumerate(moe) if layer < n)
    return on_gpu <= fwd.gpu.gpu.memory_bytes and host <= fwd.cpu.memory_bytes


@pytest.mark.parametrize("base", [BASE, "qwen3-30b-a3b/q4_k_m@rtx3060-12gb+i9-10900x",
                                  "qwen3-30b-a3b/q4_k_m@rtx3090+i9-10900x"])
def test_cpu_space_holds_only_feasible_placements(base):
    cpu = tc.split_cpu(base)
    layers = tc.feasible_layers(cpu)
    decoder = build_cpu_forward(f"{base}~cpu-all").model.decoder_layers
    assert layers == [n for n in range(decoder + 1) if _gpu_part_fits(base, n)]
    values = tc.placements(cpu)
    space = sp.engine_space("llama.cpp", placements=values, start=tc.start_placement(cpu, values))
    assert space.default.placement == f"cpu-layers:{layers[0]}"       # the fewest CPU layers that fit
    fwd = build_cpu_forward(f"{base}~cpu-misses")
    free = fwd.gpu.gpu.memory_bytes - memory_use(fwd)[0]
    for v in values:
        build_cpu_forward(cpu.name(v))          # every placement passes the profile's memory check
        if v.startswith("cpu-misses:"):
            assert 0 < int(v.split(":")[1]) * MIB <= free
    assert any(v.startswith("cpu-misses:") for v in values) and "cpu-all" in values
    # one layer fewer than the fewest is refused by the check, with the fewest named
    if layers[0] > 0:
        with pytest.raises(SimmoeError, match=f"cpu-layers:{layers[0]} at least"):
            build_cpu_forward(cpu.name(f"cpu-layers:{layers[0] - 1}"))


def test_flags_round_trip_to_the_placement_replayed():
    cpu = tc.split_cpu(BASE)
    setup = Setup(workload="gsm8k", hardware=BASE, cpu=cpu)
    for v in tc.placements(cpu):
        cfg = sp.TuneConfig("llama.cpp", "draft", "llama-chain", steps=6, draft_min=1, p_min=0.5, placement=v)
        words = cfg.flags().split()
        assert words[:2] == ["-ngl", "99"] and tc.placement_of_flags(cfg.flags()) == v
        assert words[words.index("--draft-max") + 1] == "6" and words[words.index("--draft-p-min") + 1] == "0.5"
        prof = profile_of(setup, cfg)
        placed = prof.physical.placement
        rc = replay_config(setup, cfg, prof)
        if v.startswith("cpu-layers:"):
            assert placed.kind == "layers" and placed.layers == int(words[words.index("--n-cpu-moe") + 1])
            assert rc.cache == "none"
        elif v == "cpu-all":
            assert placed.kind == "all" and "-cmoe" in words and rc.cache == "none"
        else:
            mib = int(words[words.index("--moe-cache-mib") + 1])
            assert placed.kind == "misses" and rc.cache == "lru"
            assert rc.cache_budget == int(mib * MIB // float(prof.physical.E.mean()))


@pytest.fixture(scope="module")
def qwen_trace(tmp_path_factory):
    """A 2-request synthetic Qwen3-30B-A3B trace file (EAGLE-3 tree, top-2, depth 4)."""
    from simmoe.synth import PRESETS, generate
    from simmoe.trace.io import write_trace
    from simmoe.trace.schema import PoolShape

    params = PRESETS["gsm8k"].params.with_(pool=PoolShape(expand_topk=2, depth=4, max_nodes=10, K=10))
    path = tmp_path_factory.mktemp("trace") / "q.parquet"
    write_trace(generate(params, seed=1, num_requests=2, preset="gsm8k"), path)
    return str(path)


def test_trace_workload_tunes_and_labels_its_provenance(qwen_trace, capsys):
    argv = ["tune", "--hardware", f"{BASE}~cpu-layers:36", "--engine", "llama.cpp", "--workload", qwen_trace,
            "--budget", "2s", "--no-progress", "--json", "-"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["synthetic"] is True and doc["setup"]["trace"] == qwen_trace
    assert "SYNTHETIC trace, 2 requests" in doc["setup"]["workload_label"]
    best = doc["best"][0]
    assert best["steps"] <= 4 and best["requests"] <= 2           # the trace's depth and requests bound it
    assert tc.placement_of_flags(best["flags"]) == best["placement"]
    assert "CPU experts" in doc["limit"] or "no expert runs on the CPU" in doc["limit"]
    parts = ("draft_ms_per_token", "compute_ms_per_token", "experts_ms_per_token", "cpu_experts_ms_per_token",
             "framework_ms_per_token")
    for row in doc["reason"].values():
        assert sum(row[k] for k in parts) == pytest.approx(1000.0 / row["tokens_per_s"], rel=0.05)
    assert doc["reason"]["engine default"]["placement"] == "cpu-layers:36"    # the profile's is the start


def test_recorded_trace_is_not_labelled_synthetic():
    df = simmoe.tune("traces/tiny-gsm8k-cpu.toml", workload="traces/tiny-gsm8k.parquet", engine="llama.cpp",
                     budget="3s")
    assert len(df) > 0 and not df["synthetic"].any() and df.attrs["synthetic"] is False
    assert "recorded trace" in df.attrs["workload"] and (df["workload"] == "traces/tiny-gsm8k.parquet").all()
    assert df["steps"].max() <= 5            # the trace's pools are 5 levels deep


@pytest.mark.parametrize("argv, match", [
    (["--hardware", BASE, "--engine", "sglang"], "searched for --engine llama.cpp only"),
    (["--hardware", BASE, "--engine", "vllm"], "searched for --engine llama.cpp only"),
    (["--hardware", f"{BASE}~fiddler", "--engine", "llama.cpp"], "not a llama.cpp placement"),
    (["--hardware", f"{BASE}~cpu-layers:3", "--engine", "llama.cpp"], "at least"),
    (["--hardware", BASE, "--engine", "llama.cpp", "--workload", "no/such.parquet"], "no such file"),
    (["--hardware", BASE, "--engine", "llama.cpp", "--workload", "traces/tiny-gsm8k.parquet"],
     "but the trace routes to 32 experts"),
    (["--hardware", BASE, "--engine", "llama.cpp", "--measured",
      "steps=4,accept_len=2,tokens_per_s=30,vanilla_tokens_per_s=30"], "not modelled with experts on the CPU"),
])
def test_cpu_and_trace_bad_input_is_one_line_exit_2(argv, match, capsys):
    assert main(["tune", *argv, "--budget", "5s", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("simmoe tune: error:") and match in err


def test_vllm_refuses_a_tree_trace(qwen_trace):
    with pytest.raises(SimmoeError, match="vLLM drafts a chain"):
        simmoe.tune("qwen3-30b-a3b@h100-sxm", workload=qwen_trace, engine="vllm", budget="3s")


def test_spread_keeps_both_ends():
    vals = list(range(27, 49))
    out = tc.spread(vals, 16)
    assert out[0] == 27 and out[-1] == 48 and len(out) <= 16 and out == sorted(set(out))
    assert tc.spread(vals[:5]) == vals[:5]
    assert replace(tc.split_cpu(BASE), start="cpu-all").name("cpu-misses:1024") == f"{BASE}~cpu-misses"


def test_first_sample_holds_every_placement():
    from simmoe.tune.run import starts

    cpu = tc.split_cpu(f"{BASE}~cpu-misses")
    values = tc.placements(cpu)
    start = tc.start_placement(cpu, values)
    assert start.startswith("cpu-misses:")          # the profile's cache placement, at a budget that fits
    space = sp.engine_space("llama.cpp", placements=values, start=start)
    first = starts(space)
    assert first[0] == space.default and sorted(c.placement for c in first) == sorted(values)
    assert all(space.make(space.point_of(c)) == c for c in first)
