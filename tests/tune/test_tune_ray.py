"""`simmoe tune --backend ray`: the same search, on Ray tasks; its refusals in one line."""

from __future__ import annotations

import sys

import pytest

from simmoe.cli import main

# a space the search exhausts well within the budget, so that both backends evaluate the same configurations
SMALL = dict(hardware="qwen3-30b-a3b@h100-sxm:tp2", workload="qa", engine="vllm", budget_s=120.0, seed=0,
             rungs=(1, 2), space_overrides={"steps": (1, 2, 3)})


def test_ray_backend_finds_what_processes_find():
    ray = pytest.importorskip("ray")
    from simmoe.tune.run import run_tune

    local = run_tune(**SMALL)
    assert not ray.is_initialized()
    on_ray = run_tune(backend="ray", workers=2, **SMALL)
    assert not ray.is_initialized()      # the local runtime it started is stopped again
    assert on_ray.search.rows == local.search.rows and len(local.search.rows) >= 3
    assert on_ray.best_config == local.best_config and on_ray.best == local.best


def test_address_needs_the_ray_backend(capsys):
    assert main(["tune", "--hardware", "qwen3-30b-a3b@h100-sxm:tp2", "--address", "auto", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--address needs --backend ray" in err[0]


def test_missing_ray_is_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)      # as if Ray were not installed
    assert main(["tune", "--hardware", "qwen3-30b-a3b@h100-sxm:tp2", "--backend", "ray", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--backend ray needs Ray" in err[0] and "pip install" in err[0]
