"""Defaults that follow the trace: the profile `simmoe replay` uses without --hardware, and its header."""

from __future__ import annotations

import json

import pytest
from factories import random_trace

from simmoe.cli import main
from simmoe.trace.io import write_trace


def _trace(path, *, L, N, k, name, K=None, pool_nodes=4, requests=1):
    trace = random_trace(3, num_requests=requests, output_len=(3, 5), pool_nodes=pool_nodes, L=L, N=N, k=k)
    trace.meta["geometry"]["name"] = name
    if K is not None:
        trace.meta["pool_shape"].update(max_nodes=K, K=K)
    write_trace(trace, path)
    return path


def _replay(path, *argv):
    return main(["replay", str(path), "--no-progress", "--json", "-", "--workers", "1", *argv])


def test_another_catalogued_model_replays_on_its_physical_counterpart(tmp_path, capsys):
    path = _trace(tmp_path / "olmoe.parquet", L=16, N=64, k=8, name="OLMoE-1B-7B-0924")
    assert _replay(path, "--selectors", "eagle3") == 0
    out, err = capsys.readouterr()
    note = [ln for ln in err.splitlines() if "--hardware" in ln]
    assert len(note) == 1 and "using olmoe-1b-7b@a100-pcie-40gb+pcie4-x16" in note[0]
    assert "describes another model" in note[0]
    assert json.loads(out)["config"]["hardware"] == "olmoe-1b-7b@a100-pcie-40gb+pcie4-x16"


def test_pools_beyond_the_default_b_k_use_the_physical_profile(tmp_path, capsys):
    path = _trace(tmp_path / "qa.parquet", L=48, N=128, k=8, name="Qwen3-30B-A3B-Instruct-2507", K=12,
                  pool_nodes=12)
    assert _replay(path, "--selectors", "ar,eagle3") == 0   # decided by the trace, whatever the selectors
    out, err = capsys.readouterr()
    assert "b_k stop at b_7 and the trace's pools (K = 12) need b_12" in err
    assert json.loads(out)["config"]["hardware"] == "qwen3-30b-a3b@a100-pcie-40gb+pcie4-x16"


def test_the_default_is_kept_where_it_serves(tmp_path, capsys):
    path = _trace(tmp_path / "q.parquet", L=48, N=128, k=8, name="Qwen3-30B-A3B-Instruct-2507")
    assert _replay(path, "--selectors", "specfit") == 0
    out, err = capsys.readouterr()
    assert "--hardware" not in err and json.loads(out)["config"]["hardware"] == "a100-pcie-40gb"


def test_an_explicit_hardware_is_never_replaced(tmp_path, capsys):
    path = _trace(tmp_path / "olmoe.parquet", L=16, N=64, k=8, name="OLMoE-1B-7B-0924")
    assert _replay(path, "--hardware", "a100-pcie-40gb") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "48-layer model but the trace has 16 layers" in err


def test_a_model_outside_the_catalogue_gets_one_line_naming_the_fix(tmp_path, capsys):
    path = _trace(tmp_path / "odd.parquet", L=5, N=12, k=3, name="odd")
    assert _replay(path) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not in the catalogue" in err and "give --hardware PROFILE" in err


@pytest.mark.parametrize("requests, header", [(None, "  3 requests, "), ("2", "  2 of 3 requests, "),
                                              ("3", "  3 requests, ")])
def test_the_header_says_n_of_m_requests(tmp_path, capsys, requests, header):
    path = _trace(tmp_path / "q.parquet", L=48, N=128, k=8, name="Qwen3-30B-A3B-Instruct-2507", requests=3)
    argv = ["replay", str(path), "--no-progress", "--selectors", "ar", "--workers", "1"]
    assert main(argv + (["--requests", requests] if requests else [])) == 0
    out = capsys.readouterr().out
    assert header in out
