"""The physical cost model: roofline arithmetic, the derived SpecFit costs, profiles, EVICT's profiled C(k)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.errors import ProfileError
from simmoe.hardware.catalogue import load_gpu, load_model
from simmoe.hardware.physical import (
    Overheads,
    PhysicalModel,
    evict_cost_from_unions,
    load_settings,
    parse_spec,
)
from simmoe.hardware.profile import build_profile

QWEN = load_model("qwen3-30b-a3b")
A100 = load_gpu("a100-sxm4-80gb")


def plain(model=QWEN, gpu=A100, tp=1, **kw):
    return PhysicalModel(model, gpu, tp=tp, overheads=Overheads(**kw))


def test_one_token_forward_is_the_weights_read_at_hbm_bandwidth():
    """Memory-bound: every dense weight plus top-8 experts per layer, the LM head once, at 2,039 GB/s."""
    p = plain()
    t = p.forward_ms(1, 8.0)
    heads = QWEN.vocab_size * QWEN.hidden_size * 2
    layers = QWEN.dense_bytes - 2 * heads
    want = (layers + 48 * 8 * QWEN.expert_bytes + heads) / (A100.hbm_gbps * 1e9) * 1e3
    assert t == pytest.approx(want, rel=1e-12)


@settings(max_examples=40)
@given(n=st.integers(1, 4000), u=st.floats(0, 128), du=st.floats(0, 20), dn=st.integers(0, 500),
       kv=st.floats(0, 1e5))
def test_forward_time_never_falls_with_more_tokens_experts_or_context(n, u, du, dn, kv):
    p = plain()
    base = p.forward_ms(n, u, kv, n * kv)
    assert p.forward_ms(n + dn, u, kv, (n + dn) * kv) >= base
    assert p.forward_ms(n, min(u + du, 128.0), kv, n * kv) >= base
    assert p.forward_ms(n, u, 2 * kv, 2 * n * kv) >= base


def test_roofline_switches_to_compute_with_many_tokens():
    p = plain(compute_efficiency=1.0)
    small = p.forward_ms(4, 128.0) - p.forward_ms(2, 128.0)
    assert small == pytest.approx(0.0, abs=1e-9)                 # memory-bound: tokens are free
    big = p.forward_ms(20_000, 128.0) - p.forward_ms(10_000, 128.0)
    flops = 10_000 * (p.tok_flops.sum() + p.head_flops)
    assert big == pytest.approx(flops / (A100.bf16_tflops * 1e12) * 1e3, rel=1e-9)


def test_tensor_parallelism_divides_reads_and_adds_two_all_reduces_per_layer():
    ling = load_model("ling-flash-2.0")
    one, four = plain(ling), plain(ling, tp=4)
    layers1 = one.layer_ms(1, 8.0)
    layers4 = four.layer_ms(1, 8.0)
    ring = 2 * 3 / 4 * 2 * ling.hidden_size / (A100.interconnect_gbps * 1e9) * 1e3
    ar = 2 * (A100.allreduce_latency_us * 1e-3 + ring)
    assert layers4 == pytest.approx(layers1 / 4 + ar, rel=1e-9)


def test_specfit_cost_model_is_exact_while_memory_bound():
    """b_|S| + βF(S) equals the physical cycle for any per-layer unions at batch 1 (brute force over unions)."""
    p = plain(forward_ms=0.25, step_ms=1.5)
    b, beta = p.cost_model(8, levels=3)
    rng = np.random.default_rng(0)
    for _ in range(20):
        j = int(rng.integers(0, 9))
        union = rng.integers(8, 60, size=48).astype(float)
        cycle = p.forward_ms(1 + j, union) + p.draft_ms(3) + 1.5
        assert b[j] + beta * union.sum() == pytest.approx(cycle, rel=1e-12)
    assert beta == pytest.approx(QWEN.expert_bytes / (A100.hbm_gbps * 1e9) * 1e3, rel=1e-12)


def test_dense_model_reads_its_mlp_once_per_forward():
    hy = load_model("hunyuan-7b")
    p = plain(hy)
    assert p.L_moe == 32
    assert p.forward_ms(5, 1.0) == pytest.approx(plain(hy).forward_ms(1, 1.0))


def test_evict_cost_is_drafting_plus_the_mean_forward_over_states():
    p = plain(forward_ms=1.0)
    rng = np.random.default_rng(1)
    unions = np.sort(rng.integers(8, 40, size=(5, 4, 48)), axis=1).astype(float)
    ctx = rng.integers(100, 500, size=5).astype(float)
    c = evict_cost_from_unions(p, unions, 1 + np.arange(4), ctx, levels=4)
    for k in range(1, 4):
        want = p.draft_ms(4) + np.mean([p.forward_ms(1 + k, unions[s, k], ctx[s], (1 + k) * ctx[s])
                                        for s in range(5)])
        assert c[k - 1] == pytest.approx(want, rel=1e-12)


def test_profile_names_resident_and_offload():
    r = build_profile("qwen3-30b-a3b@a100-sxm4-80gb")
    assert r.resident and r.physical is not None and r.num_layers == 48 and len(r.cost_b_cache) == 65
    o = build_profile("qwen3-30b-a3b@a100-pcie-40gb+pcie4-x16")
    assert not o.resident and o.copies_in_flight == 2
    assert o.copy_ms / 2 == pytest.approx(QWEN.expert_bytes / 24.8e9 * 1e3)
    assert o.effective_copy_ms >= o.link_ms_per_expert * (1 - 1e-9)
    t = build_profile("ling-flash-2.0@a100-sxm4-80gb:tp4")
    assert t.physical.tp == 4 and t.num_layers == 31
    assert parse_spec("a@b:tp8+c~d") == {"model": "a", "gpu": "b", "tp": 8, "link": "c", "setting": "d"}


@pytest.mark.parametrize("name, message", [
    ("qwen3-30b-a3b@b200", "unknown GPU 'b200'; known"),
    ("qwen9@h200", "unknown model 'qwen9'; known"),
    ("qwen3-30b-a3b@h200+usb", "unknown host link"),
    ("qwen3-30b-a3b@h200:tpx", "bad physical profile name"),
    ("qwen3-30b-a3b@h200~nope", "unknown cost-model setting"),
])
def test_bad_profile_names_are_one_line_errors(name, message):
    from simmoe.hardware.profile import load_profile

    with pytest.raises(Exception, match=message) as exc:
        load_profile(name)
    assert "\n" not in str(exc.value)


def test_shipped_toml_profiles_have_no_physical_model():
    from simmoe.hardware.profile import list_profiles, load_profile

    for name in list_profiles():
        assert load_profile(name).physical is None


def test_fitted_settings_are_in_bounds_and_name_what_they_were_fitted_to():
    s = load_settings()
    assert {"sglang-a100", "vllm-table6"} <= set(s)
    for setting in s.values():
        assert 0 < setting["efficiency"] <= 1 and setting["forward_ms"] >= 0
        assert "Table 4" in setting["fitted_to"]
        assert all(v >= 0 for v in setting["step_ms"].values())
    assert set(s["sglang-a100"]["step_ms"]) == {"qwen3-30b-a3b", "ling-flash-2.0", "qwen3-235b-a22b", "hunyuan-7b"}


def test_vanilla_qa_is_reproduced_where_it_was_fitted():
    """step_ms + the one-token forward = 1000 / vanilla tok/s (unless the fit had to clip step_ms at 0)."""
    from simmoe.fitting.physical_fit import vanilla_qa
    from simmoe.published import PUBLISHED

    s = load_settings()["sglang-a100"]
    for key in ("qwen3-30b-a3b", "ling-flash-2.0", "qwen3-235b-a22b"):
        tp = {"ling-flash-2.0": ":tp4", "qwen3-235b-a22b": ":tp8"}.get(key, "")
        prof = build_profile(f"{key}@a100-sxm4-80gb{tp}")
        m = prof.physical
        step = s["step_ms"][key] + m.forward_ms(1, float(m.model.trace_top_k), 300.0, 300.0)
        assert 1000 / step == pytest.approx(vanilla_qa(PUBLISHED, key), rel=1e-4)


def test_bad_overheads_are_refused():
    with pytest.raises(ProfileError, match="efficiency"):
        plain(efficiency=1.5)
    with pytest.raises(ProfileError, match="tensor parallelism"):
        PhysicalModel(QWEN, A100, tp=0)


@pytest.fixture(scope="module")
def fit_inputs():
    """The physical fit's seeded workloads, each generated once per module on first use and shared."""
    from simmoe.fitting.physical_fit import FitInputs
    from simmoe.published import PUBLISHED

    return FitInputs(PUBLISHED)


@pytest.mark.slow(25)
def test_physical_fit_reproduces_the_shipped_fit(tmp_path, fit_inputs):
    from simmoe.fitting.physical_fit import main
    from simmoe.hardware.physical import FIT_FILE

    out = tmp_path / "fit.toml"
    assert main(["--out", str(out), "--quiet"], inputs=fit_inputs) == 0
    assert out.read_text() == FIT_FILE.read_text()


# --------------------------------------------------------------------------
# what-if: weights served at FP8 (served_dtype, SIMMOE_PHYSICAL_FIT)
# --------------------------------------------------------------------------
def test_served_model_reads_weights_at_fp8_and_never_widens_narrower_ones():
    from simmoe.hardware.physical import served_model

    assert served_model(QWEN, None) is QWEN
    q8 = served_model(QWEN, "fp8")
    assert q8.expert_bytes * 2 == QWEN.expert_bytes
    assert q8.dense_bytes * 2 == pytest.approx(QWEN.dense_bytes)
    oss = load_model("gpt-oss-20b")      # MXFP4 experts stay MXFP4; its BF16 attention goes to FP8
    o8 = served_model(oss, "fp8")
    assert o8.expert_bytes == oss.expert_bytes and o8.dense_bytes < oss.dense_bytes
    with pytest.raises(ProfileError, match="served dtype"):
        served_model(QWEN, "int3")


def _what_if_fit(tmp_path, dtype: str = "fp8"):
    from simmoe.hardware.physical import FIT_FILE

    head = "[settings.sglang-a100]\n"
    text = FIT_FILE.read_text().replace(head, f'{head}served_dtype = "{dtype}"\n')
    p = tmp_path / "fit.toml"
    p.write_text(text)
    return p


def test_a_what_if_fit_file_serves_the_profile_at_its_dtype(tmp_path, monkeypatch):
    base = build_profile("qwen3-30b-a3b@a100-sxm4-80gb")
    monkeypatch.setenv("SIMMOE_PHYSICAL_FIT", str(_what_if_fit(tmp_path)))
    what_if = build_profile("qwen3-30b-a3b@a100-sxm4-80gb")
    assert what_if.expert_bytes * 2 == base.expert_bytes
    assert what_if.expert_ms == pytest.approx(base.expert_ms / 2)
    assert "weights read at fp8" in what_if.source
    # a setting without served_dtype in the same file keeps the checkpoint's dtype
    t1 = build_profile("qwen3-30b-a3b@a100-sxm4-80gb~sglang-a100-t1")
    assert t1.expert_bytes == base.expert_bytes


def test_a_missing_or_bad_what_if_fit_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("SIMMOE_PHYSICAL_FIT", str(tmp_path / "absent.toml"))
    with pytest.raises(ProfileError, match="SIMMOE_PHYSICAL_FIT") as exc:
        build_profile("qwen3-30b-a3b@a100-sxm4-80gb")
    assert "\n" not in str(exc.value)
    monkeypatch.setenv("SIMMOE_PHYSICAL_FIT", str(_what_if_fit(tmp_path, "int3")))
    with pytest.raises(ProfileError, match="unknown served dtype"):
        build_profile("qwen3-30b-a3b@a100-sxm4-80gb")


@pytest.mark.slow
def test_fp8_what_if_fits_table4_where_bf16_stops_at_its_bound(fit_inputs):
    """Table 4's slope needs more than the A100's peak at BF16; at FP8 width η lands inside its bounds."""
    from simmoe.fitting.physical_fit import fit_ck
    from simmoe.published import PUBLISHED

    bf16 = fit_ck(PUBLISHED, lambda s: None, inputs=fit_inputs)
    fp8 = fit_ck(PUBLISHED, lambda s: None, "fp8", fit_inputs)
    assert bf16["at_bound"] and not fp8["at_bound"]
    assert fp8["union_per_layer"] == bf16["union_per_layer"]      # the same pools: only the bytes differ

    def worst(f):
        return max(abs(p / t - 1) for p, t in zip(f["predicted"], f["target"], strict=True))
    assert worst(fp8) < worst(bf16) / 2


# --------------------------------------------------------------------------
# the served speculative iteration: spec_iteration_ms + spec_token_ms · verified tokens
# --------------------------------------------------------------------------
def test_the_serving_term_is_charged_to_drafting_iterations_only():
    t, b = 2.5, 0.04
    with_term, without = plain(spec_iteration_ms=t, spec_token_ms=b), plain()
    assert with_term.draft_ms(0, verified=33) == 0.0         # vanilla decoding drafts nothing, pays nothing
    for levels in (1, 4):
        assert with_term.draft_ms(levels) == pytest.approx(without.draft_ms(levels) + t)
        assert with_term.draft_ms(levels, 8) == pytest.approx(without.draft_ms(levels, 8) + t)   # once per step
        for verified in (2, 33, 8 * 33):                       # grows with the tokens the iteration verifies
            assert with_term.draft_ms(levels, 8, verified=verified) == \
                pytest.approx(without.draft_ms(levels, 8) + t + b * verified)
        assert with_term.draft_ms(levels, served=False, verified=33) == without.draft_ms(levels)


def test_evicts_ck_leaves_the_term_out_and_specfits_b_k_hold_it():
    rng = np.random.default_rng(3)
    unions = rng.integers(8, 60, size=(5, 9, 48)).astype(float)
    ctx = rng.uniform(50, 900, size=5)
    a = evict_cost_from_unions(plain(spec_iteration_ms=2.5), unions, 1 + np.arange(9), ctx, levels=4)
    b = evict_cost_from_unions(plain(), unions, 1 + np.arange(9), ctx, levels=4)
    assert np.array_equal(a, b)                                # EVICT selects with C(k) as Table 4 profiles it
    c = evict_cost_from_unions(plain(spec_iteration_ms=2.5, spec_token_ms=0.04), unions, 1 + np.arange(9), ctx,
                               levels=4)
    assert np.array_equal(c, b)
    bk_with, beta_with = plain(spec_iteration_ms=2.5, spec_token_ms=0.04, step_ms=3.0).cost_model(8, levels=4)
    bk, beta = plain(step_ms=3.0).cost_model(8, levels=4)
    # b_j verifies 1 + j tokens: SpecFit's cost model sees the whole served iteration
    assert np.allclose(np.subtract(bk_with, bk), 2.5 + 0.04 * (1 + np.arange(9))) and beta_with == beta


@pytest.fixture(scope="module")
def qa_small():
    from simmoe.fitting.physical_fit import qa_workload

    return qa_workload(requests=2)


def _replay(trace, name, term, selector, per_token=0.0, **config):
    from simmoe.hardware.physical import profile_fields
    from simmoe.hardware.profile import HardwareProfile, validate
    from simmoe.replay.engine import ReplayConfig, replay

    over = Overheads(step_ms=3.0, spec_iteration_ms=term, spec_token_ms=per_token)
    profile = validate(HardwareProfile(**profile_fields(name, overheads=over)))
    cfg = ReplayConfig(selector=selector, hardware=name, selector_ms=0.0, seed=0,
                       **({"slots": 0, "cache": "none"} | config))
    return replay(trace, cfg, profile)


@pytest.mark.parametrize("name, config", [("qwen3-30b-a3b@a100-sxm4-80gb", {}),
                                          ("qwen3-30b-a3b@a100-pcie-40gb+pcie4-x16", {"slots": 48, "cache": "lru"})])
def test_a_replay_adds_the_term_once_per_speculative_iteration(qa_small, name, config):
    """Resident (physical timer) and offloaded (event model's fixed drafting time): the same charge."""
    t, per_token = 2.5, 0.05
    for selector in ("ar", "eagle3", "evict"):
        a = _replay(qa_small, name, t, selector, per_token, **config)
        b = _replay(qa_small, name, 0.0, selector, **config)
        drafts = np.asarray(a.cycles["drafted_levels"]) > 0
        assert np.array_equal(a.cycles["draft_nodes"], b.cycles["draft_nodes"])   # EVICT's k unchanged
        verified = np.asarray(a.cycles["draft_nodes"]) + 1                        # root + selected, batch 1
        assert np.allclose(np.asarray(a.cycles["cycle_ms"]) - b.cycles["cycle_ms"],
                           np.where(drafts, t + per_token * verified, 0.0))
        assert drafts.any() == (selector != "ar")


def test_the_shipped_settings_carry_one_term_and_name_it():
    from simmoe.hardware.physical import overheads_for

    o, _ = overheads_for("sglang-a100", "qwen3-30b-a3b")
    assert 0.5 < o.spec_iteration_ms < 10.0 and "Table 1's EAGLE-3 and EVICT" in o.source
    assert 0.0 < o.spec_token_ms < 0.5
    for model in ("ling-flash-2.0", "qwen3-235b-a22b", "hunyuan-7b"):
        other, _ = overheads_for("sglang-a100", model)
        assert (other.spec_iteration_ms, other.spec_token_ms) == (o.spec_iteration_ms, o.spec_token_ms)
        assert "as a prediction" in other.source
    t1, _ = overheads_for("sglang-a100-t1", "qwen3-30b-a3b")
    assert (t1.spec_iteration_ms, t1.spec_token_ms) == (o.spec_iteration_ms, o.spec_token_ms)
    assert "prediction at temperature 1" in t1.source
    table6 = overheads_for("vllm-table6", "qwen3-30b-a3b")[0]
    assert table6.spec_iteration_ms == table6.spec_token_ms == 0.0
    from simmoe.hardware.profile import profile_line

    resident = build_profile("qwen3-30b-a3b@a100-sxm4-80gb")
    line = profile_line(resident)      # what simmoe replay prints under its table
    assert f"+{o.spec_iteration_ms:.2f} ms + {o.spec_token_ms:.3f} ms per verified token serving time" in line
    assert f"served iteration {o.spec_iteration_ms:.2f} ms + {o.spec_token_ms:.3f} ms per verified token" \
        in resident.source   # simmoe report's profile lines
    assert "serving time" not in profile_line(build_profile("qwen3-30b-a3b@h200~vllm-table6"))
    off = build_profile("qwen3-30b-a3b@a100-pcie-40gb+pcie4-x16")
    assert off.draft_fixed_ms == o.spec_iteration_ms and "serving time" in profile_line(off)


@pytest.mark.slow
def test_the_shipped_terms_give_table1s_two_qa_rows(fit_inputs):
    """The two fitted speculative figures on QA at temperature 0 (EVICT Table 1): EAGLE-3 152.8, EVICT 162.54."""
    from simmoe.fitting.physical_fit import replay_spec, table1_qa
    from simmoe.hardware.physical import overheads_for
    from simmoe.published import PUBLISHED

    o, _ = overheads_for("sglang-a100", "qwen3-30b-a3b")
    trace = fit_inputs.qa          # qa_workload(), the fit's own
    for method in ("eagle3", "evict"):
        s = replay_spec(trace, o, method).summary()
        assert s["decode_tps"] == pytest.approx(table1_qa(PUBLISHED, method), rel=1e-3)
        if method == "eagle3":
            assert s["mat"] == pytest.approx(3.07, rel=0.02)    # with EAGLE-3's fitted Mat (Table 2: 3.07)
