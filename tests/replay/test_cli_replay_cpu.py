"""`simmoe replay` with experts computed on the CPU: the regime's columns and JSON fields, and one-line refusals."""

from __future__ import annotations

import json

import pytest
from factories import random_trace

from simmoe.cli import main

NAME = "qwen3-30b-a3b/q4_k_m@rtx2080+i9-10900x~"


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    from simmoe.trace.io import write_trace

    path = tmp_path_factory.mktemp("cpu") / "t.parquet"
    write_trace(random_trace(7, num_requests=2, output_len=(4, 6), L=48, N=128, k=8, pool_nodes=6), path)
    return path


def ar_gpu_share(trace_file, gpu_layers):
    """AR's share of experts on the GPU by hand: each token's 8 experts per layer, and each prompt's union."""
    from simmoe.trace.io import read_trace

    tr = read_trace(trace_file)
    tokens = int(tr.requests.output_len.sum())
    pre = sum(tr.prefill_demand(r).sum(axis=1) for r in range(len(tr.requests)))
    return (tokens * 8 * len(gpu_layers) + pre[gpu_layers].sum()) / (tokens * 8 * 48 + pre.sum())


def replay(trace_file, hardware, *argv):
    return main(["replay", str(trace_file), "--hardware", hardware, "--no-progress", "--workers", "1",
                 "--selector-ms", "0", *argv])


def test_table_shows_the_cpu_columns(trace_file, capsys):
    assert replay(trace_file, NAME + "cpu-layers:36", "--selectors", "eagle3") == 0
    out = capsys.readouterr().out
    for head in ("CPU exp", "DRAM", "on", "GPU", "ms/token"):
        assert head in out
    assert "H2D/\ntoken" not in out and "no cache" in out          # the placement fixes the GPU's experts
    assert "SYNTHETIC" in out


@pytest.mark.parametrize("placement", ["cpu-layers:36", "cpu-all", "cpu-misses", "fiddler"])
def test_json_fields_agree_with_each_other(trace_file, capsys, placement):
    from simmoe.hardware.profile import load_profile

    assert replay(trace_file, NAME + placement, "--selectors", "eagle3", "--slots", "8", "--json", "-") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["regime"] == "cpu" and doc["synthetic"] is True
    r = doc["results"][0]
    fwd = load_profile(NAME + placement).physical
    mean_e, max_e = float(fwd.E.mean()), float(fwd.E.max())
    # DRAM bytes are the CPU's experts times their (per-layer) bytes
    assert r["cpu_reads_per_token"] * fwd.E.min() / 1e9 <= r["dram_gb_per_token"] + 1e-12
    assert r["dram_gb_per_token"] <= r["cpu_reads_per_token"] * max_e / 1e9 + 1e-12
    assert 0.0 <= r["gpu_share"] <= 1.0 and mean_e > 0
    if placement == "cpu-all":
        assert r["gpu_share"] == 0.0 and r["h2d_per_token"] == 0.0
    if placement == "cpu-layers:36":
        assert doc["baseline"]["gpu_share"] == pytest.approx(ar_gpu_share(trace_file, list(range(36, 48))))
    assert r["cpu_ms_per_token"] > 0 and r["gpu_ms_per_token"] > 0


@pytest.mark.parametrize("hardware, message", [
    ("qwen3-30b-a3b@rtx2080+nosuch~cpu-all", "unknown CPU or link 'nosuch'"),
    (NAME + "cpu-layers:49", "names more layers than"),
    ("qwen3-30b-a3b/bf16@rtx2080+i9-10900x~cpu-layers:0", "holds 8 GiB; put the experts of more layers on the CPU"),
    ("deepseek-v3/q4_k_m@rtx2080+i9-10900x~cpu-all", "more than host RAM + GPU memory"),
    ("qwen3-30b-a3b@rtx2080+i9-10900x", "name one placement"),
    ("qwen3-30b-a3b/q9@rtx2080+i9-10900x~cpu-all", "unknown weight format 'q9'"),
    (NAME + "cpu-all~foo", "neither a placement"),
    (NAME + "cpu-layers:x", "cpu-layers:N"),
])
def test_bad_profile_is_one_line(trace_file, capsys, hardware, message):
    assert replay(trace_file, hardware) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("placement, argv, message", [
    ("cpu-all", ("--prefetch", "next-layer"), "prefetching copies is not modelled"),
    ("cpu-layers:36", ("--cache-experts", "100"), "a GPU expert cache has no meaning"),
    ("cpu-misses", ("--slots", "128"), "do not fit in"),
])
def test_setting_without_meaning_is_one_line(trace_file, capsys, placement, argv, message):
    assert replay(trace_file, NAME + placement, *argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_names_of_the_other_regimes_are_read_as_before():
    from simmoe.hardware.cpu_profile import is_cpu_name

    for name in ("qwen3-30b-a3b@h200", "qwen3-30b-a3b@a100-pcie-40gb+pcie4-x16", "qwen3-30b-a3b@h200~vllm-table6",
                 "ling-flash-2.0@a100-sxm4-80gb:tp4", "a100-pcie-40gb", "p.toml"):
        assert not is_cpu_name(name)
    assert is_cpu_name(NAME + "cpu-all") and is_cpu_name("qwen3-30b-a3b@rtx2080+i9-10900x")
