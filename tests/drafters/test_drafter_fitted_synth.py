"""`simmoe synth --drafter` reads the fit for the preset's workload, says so, and keeps the defaults elsewhere."""

from __future__ import annotations

import json

import pytest

import simmoe.drafters as drafters
from simmoe.cli import main


@pytest.fixture
def fit_file(tmp_path, monkeypatch):
    path = tmp_path / "fit.toml"
    path.write_text('[lookahead.gsm8k]\nhit = 0.4242\ntarget_tps = 77.0\nprofile = "p@g"\nbatch = 1\n'
                    '[dflash.gsm8k]\nper_step = 4.5\ntarget_tps = 500.0\nprofile = "p@g"\nbatch = 4\n')
    monkeypatch.setenv("SIMMOE_DRAFTER_FIT", str(path))
    return path


def synth(capsys, preset, drafter, *params):
    args = ["synth", "--preset", preset, "--requests", "1", "--drafter", drafter, "--json", "-", "--no-progress"]
    for p in params:
        args += ["--drafter-param", p]
    code = main(args)
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else out.err)


@pytest.mark.parametrize("drafter, name, value", [("lookahead", "hit", 0.4242), ("dflash", "per_step", 4.5)])
def test_the_fitted_value_of_the_workload_is_used_and_named(fit_file, capsys, drafter, name, value):
    code, s = synth(capsys, "gsm8k", drafter)
    assert code == 0 and s["drafter"]["params"][name] == value
    note = s["provenance"]["fitted_to"][-1]
    assert f"{name} = {value:g} fitted to" in note and "on gsm8k" in note and "fit.toml" in note
    assert s["synthetic"] is True


@pytest.mark.parametrize("drafter, name", [("lookahead", "hit"), ("dflash", "per_step")])
def test_a_workload_without_a_fit_keeps_the_defaults(fit_file, capsys, drafter, name):
    code, s = synth(capsys, "cnndm", drafter)
    assert code == 0 and s["drafter"]["params"][name] == drafters.build(drafter)[name]
    assert "no fit for workload cnndm" in s["provenance"]["fitted_to"][-1]


def test_a_value_given_by_hand_wins(fit_file, capsys):
    code, s = synth(capsys, "gsm8k", "lookahead", "hit=0.3")
    assert code == 0 and s["drafter"]["params"]["hit"] == 0.3
    assert "given by hand" in s["provenance"]["fitted_to"][-1]


def test_drafters_without_a_fit_say_their_acceptance_is_the_defaults(fit_file, capsys):
    code, s = synth(capsys, "gsm8k", "mtp")
    assert code == 0 and "no published figure admitted for a fit" in s["provenance"]["fitted_to"][-1]


def test_eagle3_traces_stay_as_they_were(fit_file, capsys):
    code, s = synth(capsys, "gsm8k", "eagle3")
    assert code == 0 and "drafter" not in s
    assert not any("drafter" in line for line in s["provenance"]["fitted_to"])


def test_a_fitted_value_that_the_given_parameters_refuse_is_one_line(fit_file, capsys):
    code, err = synth(capsys, "gsm8k", "dflash", "block=4")
    assert code == 2 and "the value fitted on gsm8k" in err and err.count("\n") == 1
