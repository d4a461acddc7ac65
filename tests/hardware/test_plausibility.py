"""Physical profiles that cannot exist are refused in one line: weights that do not fit, heads that do not split."""

from __future__ import annotations

import pytest

from simmoe.cli import main
from simmoe.errors import ProfileError
from simmoe.hardware.catalogue import load_gpu, load_model, load_models
from simmoe.hardware.physical import tp_problem, valid_tp
from simmoe.hardware.profile import build_profile, load_profile


@pytest.mark.parametrize("name, fix", [
    ("qwen3-30b-a3b@a100-pcie-40gb", "qwen3-30b-a3b@a100-pcie-40gb:tp2"),      # 56.9 GiB of weights, 40 GiB
    ("qwen3-30b-a3b@rtx4090", "qwen3-30b-a3b@rtx4090:tp4"),
    ("mixtral-8x7b@a100-sxm4-80gb", "mixtral-8x7b@a100-sxm4-80gb:tp2"),
    ("deepseek-v3@h100-sxm:tp4", "deepseek-v3@h100-sxm:tp8"),
])
def test_a_resident_model_that_does_not_fit_is_refused_naming_what_would(name, fix):
    with pytest.raises(ProfileError, match="resident profile keeps every weight in GPU memory") as exc:
        load_profile(name)
    msg = str(exc.value)
    assert "\n" not in msg and f"use {fix} " in msg and "+pcie" in msg
    load_profile(fix)                                    # the fewest GPUs named do hold the weights
    gpu = name.split("@")[1].split(":")[0]
    offload = name + "+" + load_gpu(gpu).host_link
    assert not load_profile(offload).resident           # offloaded, the experts live in host memory


def test_weights_are_the_experts_plus_the_dense_weights():
    q = load_model("qwen3-30b-a3b")
    assert q.weight_bytes == 48 * 128 * q.expert_bytes + q.dense_bytes
    assert q.weight_bytes / 1e9 == pytest.approx(61.1, abs=0.1)   # 30.5B parameters in BF16
    h = load_model("hunyuan-7b")
    assert h.weight_bytes == 32 * h.expert_bytes + h.dense_bytes   # a dense model's MLPs are its "experts"


def test_every_shipped_resident_combination_used_by_the_project_still_builds():
    for name in ("qwen3-30b-a3b@a100-sxm4-80gb", "ling-flash-2.0@a100-sxm4-80gb:tp4",
                 "qwen3-235b-a22b@a100-sxm4-80gb:tp8", "hunyuan-7b@a100-sxm4-80gb", "qwen3-30b-a3b@h200~vllm-table6",
                 "olmoe-1b-7b@h100-sxm"):
        assert build_profile(name).resident


@pytest.mark.parametrize("name, what", [
    ("qwen3-30b-a3b@a100-sxm4-80gb:tp3", "does not divide Qwen3-30B-A3B-Instruct-2507's 32 attention heads"),
    ("qwen3-30b-a3b@h200:tp64", "does not divide"),
    ("mixtral-8x7b@h200:tp2+pcie5-x16", None),   # 32 heads, 8 KV heads: tp 2 splits both
    ("deepseek-v3@h200:tp8", None),               # MLA: only the query heads are split
])
def test_tensor_parallelism_must_split_the_attention_heads(name, what):
    if what is None:
        assert load_profile(name).physical.tp == int(name.split(":tp")[1].split("+")[0])
        return
    with pytest.raises(ProfileError, match=what) as exc:
        load_profile(name)
    assert "\n" not in str(exc.value) and "use :tpN with N one of 1, 2, 4, 8, 16, 32" in str(exc.value)


def test_kv_heads_must_divide_or_be_divided_by_tp(tmp_path):
    from dataclasses import replace

    q = load_model("qwen3-30b-a3b")                     # 32 query heads, 4 KV heads
    assert tp_problem(q, 8) is None and tp_problem(q, 2) is None   # KV heads replicated / split
    odd = replace(q, num_attention_heads=48, num_key_value_heads=16)
    assert "KV heads" in tp_problem(odd, 12) and tp_problem(odd, 8) is None and tp_problem(odd, 16) is None
    assert 12 not in valid_tp(odd) and 3 not in valid_tp(odd) and 24 not in valid_tp(odd)


def test_every_catalogued_model_splits_at_tp_1_2_and_its_kv_heads():
    for m in load_models().values():
        assert 1 in valid_tp(m) and 2 in valid_tp(m), m.key


@pytest.mark.parametrize("hardware, what", [
    ("qwen3-30b-a3b@a100-pcie-40gb", "weights take 56.9 GiB"),
    ("qwen3-30b-a3b@a100-sxm4-80gb:tp3", "tensor parallelism 3"),
])
def test_cli_replay_exits_2_with_one_line(tmp_path, capsys, hardware, what):
    from factories import random_trace

    from simmoe.trace.io import write_trace

    path = tmp_path / "t.parquet"
    write_trace(random_trace(1, num_requests=1, L=48, N=128, k=8), path)
    assert main(["replay", str(path), "--hardware", hardware, "--no-progress", "--selectors", "ar"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and what in err[0]
