"""The embedded published figures are the project's published.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simmoe.published import PUBLISHED

ROOT = Path(__file__).resolve().parents[1]


def test_embedded_copy_is_current():
    for cand in (ROOT / "shared" / "data" / "published.json",
                 ROOT.parent / "shared" / "data" / "published.json"):
        if cand.is_file():
            assert json.loads(cand.read_text()) == PUBLISHED
            return
    pytest.skip("shared/data/published.json is not in this checkout")


def test_roles_follow_calibration_md():
    spec = PUBLISHED["specfit"]
    assert spec["table3_gsm8k_a100"]["role"] == "fit"
    for key in ("table2_cnndm_a100", "figure4_slot_sweep_cnndm_a100", "table4_gsm8k_rtx4090",
                "table5_theory", "route_predictor", "adaptive_depth"):
        assert spec[key]["role"] == "validate", key
