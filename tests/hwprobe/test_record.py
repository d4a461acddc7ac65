"""`hwprobe record`: a valid trace, greedy output, crash safety and resume, replay end to end."""

from __future__ import annotations

import numpy as np
import pytest

from hwprobe.cli import main

pytestmark = pytest.mark.torch


def record_args(prompts, out, *extra):
    return ["record", "--config", "tiny-random", "--prompts", str(prompts), "--category", "math_reasoning",
            "--max-new-tokens", "5", "--slots", "3", "--out", str(out), "--quiet", *extra]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    import json
    folder = tmp_path_factory.mktemp("rec")
    prompts = folder / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"question_id": i, "category": "math_reasoning",
                                             "turns": [f"Question {i}: add {i} and {i} and {i}."]})
                                 for i in (1, 2, 3)) + "\n")
    out = folder / "t.parquet"
    assert main(record_args(prompts, out)) == 0
    return prompts, out


def test_trace_is_valid_and_labelled(recorded):
    from simmoe.trace.io import read_trace

    prompts, out = recorded
    tr = read_trace(out)                  # validates
    prov = tr.meta["provenance"]
    assert prov["kind"] == "hwprobe" and prov["weights"].startswith("random")
    assert prov["command"].startswith("hwprobe record --config tiny-random")
    assert {"model", "device", "date"} <= set(prov)
    assert tr.geometry.num_layers == 2 and tr.geometry.num_experts == 8 and tr.geometry.top_k == 2
    assert list(tr.requests.output_len) == [5, 5, 5]
    assert tr.pool_shape.max_nodes == 18 and tr.pool_size(0) == 18      # the random drafter fills the shape
    assert tr.meta["hardware"]["source"].startswith("measured by hwprobe")
    assert not (out.parent / (out.name + ".parts")).exists()
    assert (tr.requests.prefill_union.sum(axis=2) >= 2).all()
    assert np.isfinite(tr.requests.prefill_time_ms).all()


def test_recorded_output_is_greedy_and_agreement_is_the_targets(recorded):
    import torch

    from hwprobe.models import load_target
    from hwprobe.specdecode import greedy_generate
    from hwprobe.tree import lm_forward, new_cache
    from simmoe.trace.io import read_trace

    prompts, out = recorded
    tr = read_trace(out)
    lm = load_target(config="tiny-random", seed=0)
    prompt = lm.tokenizer.encode_prompt("Question 1: add 1 and 1 and 1.")
    a, b = tr.request_positions(0)
    assert tr.root_token[a:b].tolist() == greedy_generate(lm.model, prompt, 5)
    # node 0 of position 0 agrees iff the target's argmax after root equals its token
    first = lm_forward(lm.model, torch.tensor([prompt + [int(tr.root_token[0])]]), new_cache(lm.model))
    j = tr.pool_slice(0).start
    assert tr.node_agree[j] == (int(first.logits[0, -1].argmax()) == int(tr.node_token[j]))


def test_replay_end_to_end(recorded):
    from simmoe.replay.engine import ReplayConfig, replay
    from simmoe.trace.io import read_trace

    tr = read_trace(recorded[1])
    ar = replay(tr, ReplayConfig(selector="ar", slots=4, hardware="a100-pcie-40gb"))
    eagle = replay(tr, ReplayConfig(selector="eagle3", slots=4, hardware="a100-pcie-40gb"))
    assert ar is not None and eagle is not None


def test_killed_run_resumes_and_never_leaves_a_partial_trace(recorded, tmp_path, monkeypatch, capsys):
    import hwprobe.recorder as recorder
    from simmoe.trace.io import read_trace

    prompts, reference = recorded
    out = tmp_path / "t.parquet"
    real, calls = recorder.record_request, []

    def dies_on_second(*a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(recorder, "record_request", dies_on_second)
    assert main(record_args(prompts, out)) == 130
    parts = tmp_path / "t.parquet.parts"
    assert not out.exists() and sorted(p.name for p in parts.iterdir()) == ["00000.npz", "run.json"]
    # other arguments do not mix with the parts of this run
    assert main(record_args(prompts, out, "--seed", "9")) == 2
    assert "different recording" in capsys.readouterr().err
    monkeypatch.setattr(recorder, "record_request", real)
    assert main(record_args(prompts, out)) == 0
    assert "(1 resumed)" in capsys.readouterr().out
    a, b = read_trace(out), read_trace(reference)
    for name in ("root_token", "node_token", "node_parent", "node_agree", "root_routes", "node_routes"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert not parts.exists()


@pytest.mark.parametrize("setup,message", [
    ("missing", "does not exist"),
    ("file", "is a file; give a model directory"),
    ("no_config", "no config.json"),
    ("no_weights", "no weight files"),
    ("llama", "m/config.json: architecture 'llama' has no experts module using transformers' experts interface"),
])
def test_bad_model_directories(tmp_path, capsys, prompts_file, setup, message):
    d = tmp_path / "m"
    if setup == "file":
        d.write_text("{}")
    elif setup != "missing":
        d.mkdir()
    if setup in ("no_weights", "llama"):
        (d / "config.json").write_text('{"model_type": "llama"}')
    if setup == "llama":
        (d / "model.safetensors").write_bytes(b"")
    out = tmp_path / "t.parquet"
    rc = main(["record", "--model", str(d), "--prompts", str(prompts_file), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_bad_prompts_and_config(tmp_path, capsys, prompts_file):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question_id": 1, "category": "x", "turns": ["a"]}\nnot json\n{"question_id": 2}\n')
    out = tmp_path / "t.parquet"
    assert main(record_args(bad, out)) == 2
    err = capsys.readouterr().err
    assert "line 2: not JSON" in err and "line 3: missing category, turns" in err
    assert main(["record", "--config", "nope", "--prompts", str(prompts_file), "--out", str(out)]) == 2
    assert "unknown config 'nope'" in capsys.readouterr().err
    assert not out.exists()


def test_record_from_a_model_directory(tmp_path, prompts_file):
    from hwprobe_models import tiny_model

    from simmoe.trace.io import read_trace

    d = tmp_path / "model"
    tiny_model(seed=11).save_pretrained(d)
    out = tmp_path / "t.parquet"
    assert main(["record", "--model", str(d), "--prompts", str(prompts_file), "--category", "math_reasoning",
                 "--limit", "1", "--max-new-tokens", "3", "--max-total-tokens", "200", "--out", str(out),
                 "--quiet"]) == 0
    tr = read_trace(out)
    assert tr.meta["provenance"]["weights"] == "trained" and tr.meta["provenance"]["drafter"] == "ngram"
    assert tr.num_positions == 3


def test_missing_tiny_model_is_one_clear_error(tmp_path, monkeypatch, prompts_file, capsys):
    import hwprobe.tiny as tiny

    monkeypatch.setattr(tiny, "MODEL_DIR", tmp_path / "absent")
    rc = main(["record", "--model", "tiny", "--prompts", str(prompts_file), "--out", str(tmp_path / "t.parquet")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "tiny target is missing" in err and len(err.splitlines()) == 1
