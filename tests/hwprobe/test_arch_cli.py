"""`hwprobe record` and `hwprobe live` end to end on tiny configs of several architectures.

Bad input is refused with one line on stderr and exit status 2, before the
model loads where the arguments alone decide it, and nothing is left
behind (no trace, no parts folder, no live file).
"""

from __future__ import annotations

import json

import pytest

from hwprobe.cli import main

pytestmark = pytest.mark.torch
E2E = ["mixtral", "olmoe", "qwen2_moe", "deepseek_v2", "gpt_oss"]


@pytest.fixture
def one_prompt(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(
        json.dumps(
            {
                "question_id": 7,
                "category": "math_reasoning",
                "turns": ["Add 3 and 4, then 3 and 4 again."],
            }
        )
        + "\n"
    )
    return path


@pytest.mark.slow
@pytest.mark.parametrize("model_type", E2E)
def test_record_and_live_end_to_end(tmp_path, one_prompt, capsys, model_type):
    from hwprobe.architectures import ARCHITECTURES
    from simmoe.replay.engine import ReplayConfig, replay
    from simmoe.trace.io import read_trace
    from simmoe.validation.live import read_live

    trace = tmp_path / "t.parquet"
    common = [
        "--config",
        f"tiny-{model_type}",
        "--prompts",
        str(one_prompt),
        "--slots",
        "3",
        "--quiet",
    ]
    assert main(["record", *common, "--max-new-tokens", "3", "--out", str(trace)]) == 0
    tr = read_trace(trace)  # validates, geometry included
    g = tr.geometry
    dense = {"deepseek_v2": [0], "qwen2_moe": [0]}.get(model_type, [])
    assert (
        list(g.dense_layers) == dense and g.decoder_layers == 3 and g.num_layers == 3 - len(dense)
    )
    assert tr.meta["provenance"]["resident"]["dense_layers"] == dense
    assert tr.requests.prefill_union.shape[1] == g.num_layers and tr.num_positions == 3
    # the simulator replays it with the MoE layers only
    res = replay(tr, ReplayConfig(selector="eagle3", slots=3, hardware="a100-pcie-40gb"))
    assert res is not None
    live = tmp_path / "l.jsonl"
    assert (
        main(["live", *common, "--selector", "eagle3", "--max-new-tokens", "4", "--out", str(live)])
        == 0
    )
    out = capsys.readouterr().out
    assert "greedy check passed" in out
    run = read_live(live)
    assert run.meta["geometry"]["moe_layers"] == list(g.moe_layers)
    assert run.meta["attn"] == ARCHITECTURES[model_type].attn
    assert sum(len(r["tokens"]) for r in run.requests) == 4


def test_models_lists_every_architecture_with_its_tests(capsys):
    from hwprobe.architectures import ARCHITECTURES

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for a in ARCHITECTURES.values():
        assert f"{a.label} ({a.model_type})" in out
    assert "record + live end to end" in out and "no: hybrid" in out
    assert main(["models", "--markdown"]) == 0
    md = capsys.readouterr().out.splitlines()
    assert md[0].startswith("| architecture |") and len(md) == 2 + len(ARCHITECTURES)


def test_hybrid_architecture_is_refused_for_record(tmp_path, one_prompt, capsys):
    out = tmp_path / "t.parquet"
    rc = main(
        [
            "record",
            "--config",
            "tiny-qwen3_next",
            "--prompts",
            str(one_prompt),
            "--out",
            str(out),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert (
        "Qwen3-Next (qwen3_next) cannot verify a draft tree in one forward: hybrid linear attention"
        in err
    )
    assert not out.exists() and not (tmp_path / "t.parquet.parts").exists()


@pytest.fixture(scope="module")
def mixtral_dir(tmp_path_factory):
    from hwprobe.models import load_target

    d = tmp_path_factory.mktemp("mixtral")
    load_target(config="tiny-mixtral", seed=3, quiet=True).model.save_pretrained(d)
    return d


def _copy_dir(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize(
    "damage,message",
    [
        ("truncate", "model.safetensors: cannot load the weights"),
        ("config", "model.safetensors: the weights do not match"),
    ],
)
def test_damaged_model_directory_is_one_line(
    tmp_path, mixtral_dir, one_prompt, capsys, damage, message
):
    d = _copy_dir(mixtral_dir, tmp_path / "m")
    if damage == "truncate":
        f = d / "model.safetensors"
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    else:
        cfg = json.loads((d / "config.json").read_text())
        cfg["intermediate_size"] = 48  # the expert weights hold 32
        (d / "config.json").write_text(json.dumps(cfg))
    out = tmp_path / "t.parquet"
    rc = main(
        [
            "record",
            "--model",
            str(d),
            "--prompts",
            str(one_prompt),
            "--max-new-tokens",
            "2",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1, err
    assert not out.exists() and not (tmp_path / "t.parquet.parts").exists()


def test_record_from_a_mixtral_directory_is_quiet(tmp_path, mixtral_dir, one_prompt, capsys):
    out = tmp_path / "t.parquet"
    assert (
        main(
            [
                "record",
                "--model",
                str(mixtral_dir),
                "--prompts",
                str(one_prompt),
                "--max-new-tokens",
                "2",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert captured.err == ""  # no loading bars, no progress under --quiet
    assert "wrote" in captured.out


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--depth", "0"], "--depth must be >= 1"),
        (["--drafter", "target", "--agreement", "1.7"], "--agreement must lie in [0, 1]"),
        (
            ["--max-total-tokens", "5"],
            "--max-total-tokens 5 leaves no room for output after the prompts of requests 7",
        ),
        (["--slots", "-1"], "--slots must be >= 0"),
        (["--K", "0"], "--K must be >= 1"),
    ],
)
def test_bad_arguments_are_refused_before_loading_and_leave_nothing(
    tmp_path, one_prompt, capsys, monkeypatch, extra, message
):
    import hwprobe.models as models

    def no_loading(*a, **kw):
        raise AssertionError("the model was loaded before the arguments were checked")

    monkeypatch.setattr(models, "load_target", no_loading)
    out = tmp_path / "t.parquet"
    rc = main(
        [
            "record",
            "--config",
            "tiny-mixtral",
            "--prompts",
            str(one_prompt),
            "--out",
            str(out),
            "--quiet",
            *extra,
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1, err
    assert not out.exists() and not (tmp_path / "t.parquet.parts").exists()


def test_resume_with_other_arguments_is_refused_before_loading(
    tmp_path, one_prompt, capsys, monkeypatch
):
    import hwprobe.models as models
    from hwprobe.commands.record import fingerprint
    from hwprobe.prompts import read_prompts
    from hwprobe.recorder import PartsFolder
    from hwprobe.session import prepare

    out = tmp_path / "t.parquet"
    argv = [
        "record",
        "--config",
        "tiny-mixtral",
        "--prompts",
        str(one_prompt),
        "--out",
        str(out),
        "--quiet",
    ]
    args = __import__("hwprobe.cli", fromlist=["build_parser"]).build_parser().parse_args(argv)
    prompts = read_prompts(one_prompt)
    PartsFolder(
        out, fingerprint(args, prepare(args), prompts)
    ).open()  # parts of a run with --seed 0
    monkeypatch.setattr(
        models, "load_target", lambda *a, **kw: (_ for _ in ()).throw(AssertionError("loaded"))
    )
    assert main([*argv, "--seed", "5"]) == 2
    assert "different recording" in capsys.readouterr().err
    # a different cache size is the same recording: the advice after an out-of-memory error works
    a2 = (
        __import__("hwprobe.cli", fromlist=["build_parser"])
        .build_parser()
        .parse_args([*argv, "--slots", "4"])
    )
    assert fingerprint(a2, prepare(a2), prompts) == fingerprint(args, prepare(args), prompts)


def test_failed_first_request_leaves_no_parts_folder(tmp_path, one_prompt, capsys, monkeypatch):
    import hwprobe.recorder as recorder
    from hwprobe.cli import HwprobeError

    def fails(*a, **kw):
        raise HwprobeError("out of device memory; use fewer --slots")

    monkeypatch.setattr(recorder, "record_request", fails)
    out = tmp_path / "t.parquet"
    rc = main(
        [
            "record",
            "--config",
            "tiny-mixtral",
            "--prompts",
            str(one_prompt),
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 2 and "use fewer --slots" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "t.parquet.parts").exists()
