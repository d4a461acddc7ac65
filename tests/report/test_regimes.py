"""`simmoe report`'s selector × regime × batch table (simmoe.report.regimes)."""

from __future__ import annotations

import numpy as np
import pytest

from simmoe.report.experiments import ReportSettings
from simmoe.report.regimes import SELECTORS, applies, regime_rows, regime_table


@pytest.fixture(scope="module")
def qwen_trace():
    from simmoe.synth import synth_preset

    return synth_preset("gsm8k", num_requests=3)


def test_table_covers_every_selector_regime_and_batch(qwen_trace):
    df = regime_rows(qwen_trace, "gsm8k.parquet", ReportSettings(slots=12), batches=(1, 2))
    assert len(df) == len(SELECTORS) * 2 * 2
    assert set(df["regime"]) == {"offload", "resident"} and set(df["batch"]) == {1, 2}
    assert df["synthetic"].all()
    ar = df[df["selector"] == "ar"]
    assert np.allclose(ar[ar["regime"] == "resident"]["speedup"], 1.0)   # AR resident has no cache to gain from
    assert (df["decode_tps"] > 0).all()
    text = regime_table(df)
    assert text.count("\n") == 1 + 4 and "resident" in text and "offload" in text


def test_batch_one_rows_are_the_per_request_engines(qwen_trace):
    from simmoe.hardware.profile import load_profile
    from simmoe.replay.engine import ReplayConfig, replay

    df = regime_rows(qwen_trace, "gsm8k.parquet", ReportSettings(slots=12), batches=(1,))
    row = df[(df["regime"] == "resident") & (df["selector"] == "eagle3")].iloc[0]
    prof = load_profile("qwen3-30b-a3b@a100-sxm4-80gb")
    cfg = ReplayConfig(selector="eagle3", slots=0, cache="none", hardware=prof.name, selector_ms=0.0)
    assert row["decode_tps"] == replay(qwen_trace, cfg, prof).summary()["decode_tps"]


def test_other_geometries_get_no_table(small_trace):
    assert not applies(small_trace)
    assert len(regime_rows(small_trace, "x.parquet", ReportSettings())) == 0
    assert regime_table(None) == ""


def test_a_base_profile_of_another_model_is_refused(qwen_trace):
    from simmoe.errors import ProfileError

    with pytest.raises(ProfileError, match=r"^gsm8k\.parquet: profile olmoe-1b-7b@h100-sxm \(--hardware\) is OLMoE"):
        regime_rows(qwen_trace, "gsm8k.parquet", ReportSettings(hardware="olmoe-1b-7b@h100-sxm"), batches=(1,))
