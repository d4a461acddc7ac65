"""The live loop's lossless check (near-ties in low precision) and its out-of-memory guard."""

from __future__ import annotations

import pytest
import torch
from hwprobe_models import tiny_model

from hwprobe.cli import main
from hwprobe.live import LosslessCheckFailed, lossless_check, tie_tolerance
from hwprobe.specdecode import greedy_generate
from hwprobe.tree import lm_forward, new_cache

pytestmark = pytest.mark.torch
PROMPT = [40, 41, 42, 43, 40, 41]


def _second_best(model, context) -> int:
    logits = lm_forward(model, torch.tensor([context]), new_cache(model)).logits[0, -1]
    return int(torch.topk(logits, 2).indices[1])


def test_tie_tolerance_is_the_dtypes_rounding():
    assert tie_tolerance(torch.bfloat16) == 2 * 2**-7
    assert tie_tolerance(torch.float32) == 2 * 2**-23


def test_identical_output_passes_with_no_ties():
    model = tiny_model(seed=6)
    out = greedy_generate(model, PROMPT, 8)
    assert lossless_check(model, PROMPT, out, 8, None, what="r") == 0


def test_a_flip_to_the_runner_up_is_a_tie_only_within_the_tolerance(monkeypatch):
    import hwprobe.live as live

    model = tiny_model(seed=6)
    greedy = greedy_generate(model, PROMPT, 8)
    at = 3
    flipped = greedy[:at] + [_second_best(model, PROMPT + greedy[:at])]
    flipped += greedy_generate(
        model, PROMPT + flipped, 8 - len(flipped)
    )  # greedy again after the flip
    with pytest.raises(LosslessCheckFailed, match="at output position 3 .*top-2 logit gap"):
        lossless_check(model, PROMPT, flipped, 8, None, what="r")  # float32: a real difference
    monkeypatch.setattr(live, "tie_tolerance", lambda dtype: 1.0)  # every gap counts as a tie
    assert (
        lossless_check(model, PROMPT, flipped, 8, None, what="r") == 1
    )  # accepted, and the rest checked
    broken = flipped[:6] + [(flipped[6] + 1) % 300 + 3, *flipped[7:]]
    if broken[6] not in {flipped[6], _second_best(model, PROMPT + flipped[:6])}:
        with pytest.raises(LosslessCheckFailed, match="position 6"):
            lossless_check(
                model, PROMPT, broken, 8, None, what="r"
            )  # not a top-2 swap: never a tie


def test_out_of_memory_in_the_warm_up_is_one_line(tmp_path, prompts_file, capsys, monkeypatch):
    import hwprobe.live as live

    def oom(*a, **kw):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(live, "warm_up", oom)
    out = tmp_path / "l.jsonl"
    rc = main(
        [
            "live",
            "--config",
            "tiny-random",
            "--prompts",
            str(prompts_file),
            "--selector",
            "ar",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert (
        rc == 2 and len(err.splitlines()) == 1 and "out of device memory; use fewer --slots" in err
    )
    assert not out.exists() and not (tmp_path / "l.jsonl.partial").exists()


def test_draft_lm_loads_in_the_targets_dtype(tmp_path):
    from hwprobe.drafters import make_drafter

    d = tmp_path / "draft"
    tiny_model(seed=1).save_pretrained(d)
    drafter = make_drafter("draft-lm", path=d, device=torch.device("cpu"), dtype=torch.bfloat16)
    assert drafter.model.dtype == torch.bfloat16
