"""`simmoe tune` on the command line: output, JSON, bad input in one line, Ctrl-C."""

from __future__ import annotations

import json
import signal

import pytest
from interrupt_helpers import signal_in_process

from simmoe.cli import main

HW = "qwen3-30b-a3b@h100-sxm:tp2"
FAST = ["--hardware", HW, "--workload", "qa", "--engine", "vllm", "--budget", "20s", "--no-progress"]


def test_prints_flags_reason_and_json(tmp_path, capsys):
    out, fig = tmp_path / "t.json", tmp_path / "heat.png"
    assert main(["tune", *FAST, "--json", str(out), "--figure", str(fig)]) == 0
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = capsys.readouterr().out
    assert "PREDICTIONS on synthetic traces" in text and "--speculative-config" in text
    assert "why (ms per decoded token, predicted)" in text
    doc = json.loads(out.read_text())
    assert doc["synthetic"] is True
    best = doc["best"][0]
    assert best["flags"] in text
    assert set(doc["reason"]) == {"best", "engine default", "AR"}
    parts = ("draft_ms_per_token", "compute_ms_per_token", "experts_ms_per_token", "framework_ms_per_token")
    for row in doc["reason"].values():
        # the parts add up to the replay's time per decoded token (1000 / tokens/s, prefill apart)
        assert sum(row[k] for k in parts) == pytest.approx(1000.0 / row["tokens_per_s"], rel=0.05)
    assert doc["best"][0]["tokens_per_s"] >= max(b["tokens_per_s"] for b in doc["best"])


@pytest.mark.parametrize("argv, match", [
    (["--hardware", "qwen3-30b-a3b@h100-sxm:tp4", "--engine", "llama.cpp"], "no tensor parallelism"),
    (["--hardware", HW, "--engine", "llama.cpp", "--algorithm", "EAGLE3"], "no such speculative algorithm"),
    (["--hardware", HW, "--engine", "vllm", "--algorithm", "lookahead"], "no such speculative algorithm"),
    (["--hardware", HW, "--workload", "wikitext"], "no synthetic preset"),
    (["--hardware", HW, "--budget", "0s"], "more than 0 seconds"),
    (["--hardware", HW, "--budget", "-5"], "more than 0 seconds"),
    (["--hardware", HW, "--budget", "soon"], "write seconds"),
    (["--hardware", HW, "--batch", "0"], "batch size"),
    (["--hardware", HW, "--measured", "steps=3,accept_len=2"], "missing"),
    (["--hardware", HW, "--measured", "steps=3,colour=2"], "KEY=VALUE"),
    (["--hardware", "nosuch@h100-sxm"], ""),
    (["--hardware", HW, "--figure", "x.txt"], "--figure"),
])
def test_bad_input_is_one_line_exit_2(argv, match, capsys):
    assert main(["tune", *argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("simmoe tune: error:") and match in err


@pytest.mark.parametrize("sig, rc", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_after_the_first_rung_prints_the_best_so_far(tmp_path, monkeypatch, capsys, sig, rc):
    r = signal_in_process(["tune", *FAST], tmp_path, monkeypatch, point="tune-rung-0", sig=sig)
    assert r["rc"] == rc
    cap = capsys.readouterr()
    assert "interrupted: the best found so far" in cap.out and "flags (best):" in cap.out
    assert cap.err.count("\n") == 1 and "best configuration found so far" in cap.err


def test_measured_point_says_which_terms_came_from_it(capsys):
    point = "steps=3,accept_len=1.6,tokens_per_s=150,vanilla_tokens_per_s=170"
    assert main(["tune", *FAST, "--measured", point, "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["calibration"]) == {"vanilla step", "drafter confidence", "served iteration"}
    assert "vanilla 170" in doc["calibration"]["vanilla step"]
    # the measured configuration (vLLM chain n=3) replayed after the recalibration gives the measured speed
    row = next((b for b in doc["best"] if b["steps"] == 3), None)
    if row is not None:
        assert row["accept_len"] == pytest.approx(1.6, abs=0.1)
