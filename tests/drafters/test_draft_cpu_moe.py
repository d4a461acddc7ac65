"""llama.cpp's draft model as an MoE with its own expert placement (``draft_n_cpu_moe``), by hand on a toy."""

from __future__ import annotations

import pytest
from cpu_toy import H, c_e, gpu_layer, head, toy_forward, toy_model

import simmoe.drafters as drafters
import simmoe.hardware.catalogue as catalogue
from simmoe.drafters.cost import DrafterCpuForward, DrafterPhysical
from simmoe.errors import SimmoeError

SYNC_US, LINK = 10.0, 10e9        # toy_forward's sync (0.01 ms) and link (10 GB/s)


@pytest.fixture
def toy_catalogue(monkeypatch):
    """The toy model catalogued as "toy" (the draft model of these tests), every other name as before."""
    real = catalogue.load_model
    monkeypatch.setattr(catalogue, "load_model", lambda name: toy_model() if name == "toy" else real(name))


def chain(**params):
    return drafters.build("llama-chain", {"draft_model": "toy", **params})


def test_first_layer_on_the_cpu_by_hand(toy_catalogue):
    """One token per draft step reaches top-2 experts per layer: layer 0's two on the CPU (each read once), layer 1's
    two on the GPU; the step is the draft model's forward, and ``levels`` steps cost ``levels`` times it."""
    host = toy_forward("cpu-layers:2")                 # the target's own placement does not move the draft's
    fwd = DrafterCpuForward(host, chain(draft_n_cpu_moe=1))
    side = SYNC_US + 1 * 2 * H * 4 / LINK * 1e6 + 2 * c_e(1)       # sync, F32 round trip, two CPU experts
    step = gpu_layer(1, 0, 0) + side + gpu_layer(1, 2, 2) + head(1)
    assert fwd.draft_ms(1, served=False) * 1e3 == pytest.approx(step, rel=1e-12)
    assert fwd.draft_ms(3, served=False) * 1e3 == pytest.approx(3 * step, rel=1e-12)


def test_every_layer_on_the_cpu_and_none_by_hand(toy_catalogue):
    host = toy_forward("cpu-layers:0")
    side = SYNC_US + 2 * H * 4 / LINK * 1e6 + 2 * c_e(1)
    all_cpu = DrafterCpuForward(host, chain(draft_n_cpu_moe=2)).draft_ms(1, served=False) * 1e3
    assert all_cpu == pytest.approx(2 * (gpu_layer(1, 0, 0) + side) + head(1), rel=1e-12)
    gpu_only = 2 * gpu_layer(1, 2, 2) + head(1)
    assert DrafterCpuForward(host, chain(draft_n_cpu_moe=0)).draft_ms(1, served=False) * 1e3 == \
        pytest.approx(gpu_only, rel=1e-12)
    # without the parameter the draft model runs on the GPU alone: the same as no layer on the CPU
    assert DrafterCpuForward(host, chain()).draft_ms(1, served=False) * 1e3 == pytest.approx(gpu_only, rel=1e-12)
    assert all_cpu > gpu_only


def test_batch_reads_the_union(toy_catalogue):
    """At 3 requests each CPU expert of the union serves n·k/u tokens (the union view of CpuForward)."""
    host = toy_forward("cpu-layers:0", eta_cpu=0.001)          # a slow CPU: compute-bound experts
    d = chain(draft_n_cpu_moe=2)
    u = 4 * (1 - (1 - 2 / 4) ** 3)
    want = DrafterCpuForward(host, d).draft_ms(1, 3, served=False)
    per = 3 * 2 / u
    side = SYNC_US + 3 * 2 * H * 4 / LINK * 1e6 + c_e(per, 0.001) * 4    # ceil(u) = 4 experts, one socket
    assert want * 1e3 == pytest.approx(2 * (gpu_layer(3, 0, 0) + side) + head(3), rel=1e-12)


@pytest.mark.parametrize("params, match", [
    ({"draft_model": "hunyuan-7b", "draft_n_cpu_moe": 1}, "is dense"),
    ({"draft_model": "toy", "draft_n_cpu_moe": 3}, "names more layers than Toy has"),
    ({"draft_model": "toy", "draft_n_cpu_moe": -1}, "must be non-negative"),
    ({"draft_n_cpu_moe": 1}, "name the draft model"),
])
def test_refusals_are_one_line(toy_catalogue, params, match):
    with pytest.raises(SimmoeError, match=match) as exc:
        drafters.build("llama-chain", params)
    assert "\n" not in str(exc.value)


def test_a_profile_without_a_cpu_is_refused(toy_catalogue):
    gpu_only = DrafterPhysical(toy_forward("cpu-layers:0").gpu, chain(draft_n_cpu_moe=1))
    with pytest.raises(SimmoeError, match="the profile has none") as exc:
        gpu_only.draft_ms(1)
    assert "\n" not in str(exc.value)


def test_the_cli_refuses_on_a_physical_profile(tmp_path, capsys):
    from simmoe.cli import main

    out = tmp_path / "chain.parquet"
    assert main(["synth", "--preset", "gsm8k", "--requests", "1", "--model", "olmoe-1b-7b", "--drafter",
                 "llama-chain", "--drafter-param", "draft_max=4", "--drafter-param", "draft_model=olmoe-1b-7b",
                 "--drafter-param", "draft_n_cpu_moe=4", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["replay", str(out), "--hardware", "olmoe-1b-7b@rtx4090", "--selectors", "evict",
                 "--slots", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "the profile has none" in err and "\n" not in err
    assert main(["replay", str(out), "--hardware", "olmoe-1b-7b@rtx4090+i9-10900x~cpu-layers:8",
                 "--selectors", "evict", "--slots", "0"]) == 0


def test_each_layer_moved_to_the_cpu_costs_more_on_a_catalogued_host():
    """OLMoE drafting for itself on an RTX 4090 + i9-10900X: DRAM is slower than HBM, so every further layer
    whose experts move to the CPU makes the draft step slower, from the GPU-only forward at N = 0."""
    from simmoe.drafters.cost import profile_with_drafter
    from simmoe.hardware.profile import load_profile

    prof = load_profile("olmoe-1b-7b@rtx4090+i9-10900x~cpu-layers:8")
    steps = [profile_with_drafter(prof, drafters.build("llama-chain", {
        "draft_model": "olmoe-1b-7b", "draft_n_cpu_moe": n})).physical.draft_ms(1, served=False) for n in range(17)]
    gpu = profile_with_drafter(prof, drafters.build("llama-chain", {"draft_model": "olmoe-1b-7b"}))
    assert steps[0] == pytest.approx(gpu.physical.draft_ms(1, served=False), rel=1e-12)
    assert all(b > a for a, b in zip(steps, steps[1:]))
