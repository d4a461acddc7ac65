"""`simmoe import-routes --model NAME`: the catalogue's geometry, a disagreeing log refused, replay follows it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simmoe.cli import main
from simmoe.hardware.catalogue import load_model
from simmoe.trace.io import read_trace


def _log(path, layers=16, experts=64, k=8, requests=2, tokens=4):
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        for r in range(requests):
            for t in range(tokens):
                for layer in range(layers):
                    e = sorted(int(x) for x in rng.choice(experts, size=k, replace=False))
                    f.write(json.dumps({"request_id": r, "token_idx": t, "layer": layer, "experts": e}) + "\n")
    return path


def test_the_catalogue_gives_the_geometry_and_replay_follows_it(tmp_path, capsys):
    out = tmp_path / "o.parquet"
    assert main(["import-routes", str(_log(tmp_path / "log.jsonl")), "--out", str(out),
                 "--model", "olmoe-1b-7b"]) == 0
    spec = load_model("olmoe-1b-7b")
    g = read_trace(out).geometry
    assert (g.num_layers, g.num_experts, g.top_k) == (len(spec.moe_layers), 64, 8)
    assert g.expert_bytes == spec.expert_bytes > 0 and g.name == spec.name
    assert g.moe_layers == spec.moe_layers and g.decoder_layers == spec.decoder_layers
    capsys.readouterr()
    assert main(["replay", str(out), "--selectors", "ar", "--no-progress", "--workers", "1", "--json", "-"]) == 0
    o, err = capsys.readouterr()
    assert json.loads(o)["config"]["hardware"] == "olmoe-1b-7b@a100-pcie-40gb+pcie4-x16"
    assert "using olmoe-1b-7b@a100-pcie-40gb+pcie4-x16" in err


@pytest.mark.parametrize("log, extra, message", [
    (dict(layers=12), [], "the log disagrees with OLMoE-1B-7B-0924's geometry (16 MoE layers x 64 experts, top-8)"),
    (dict(layers=17), [], "layer 16 outside [0, 16)"),
    (dict(experts=96), [], "outside [0, 64)"),
    (dict(k=4), [], "4 experts, expected 8"),
    ({}, ["--num-layers", "12"], "--num-layers 12 disagrees with --model olmoe-1b-7b (16)"),
    ({}, ["--expert-bytes", "5"], "--expert-bytes 5 disagrees"),
    ({}, ["--model-name", "x"], "leave out --model-name"),
])
def test_a_log_or_flag_that_disagrees_is_refused(tmp_path, capsys, log, extra, message):
    out = tmp_path / "o.parquet"
    argv = ["import-routes", str(_log(tmp_path / "log.jsonl", **log)), "--out", str(out),
            "--model", "olmoe-1b-7b", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.parametrize("model, message", [("hunyuan-7b", "is a dense model"), ("nope", "unknown model 'nope'")])
def test_unusable_models(tmp_path, capsys, model, message):
    argv = ["import-routes", str(_log(tmp_path / "log.jsonl")), "--out", str(tmp_path / "o.parquet"),
            "--model", model]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
