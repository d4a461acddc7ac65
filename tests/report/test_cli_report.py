"""`simmoe report`: deterministic files, labels, published figures beside, clean errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from simmoe.cli import main

ARGS = ["--requests", "3", "--workers", "1", "--quiet"]
FIGS = ("tps", "slots", "link", "routes", "policy", "prefetch")


def profile_args(any_profiles) -> list[str]:
    """The default profiles stating no geometry: they time the small traces (the shipped ones describe 48 layers)."""
    return ["--hardware", any_profiles["hardware"], "--hardware-rtx", any_profiles["hardware_rtx"]]


@pytest.fixture(scope="module")
def two_runs(trace_files, tmp_path_factory, any_profiles):
    outs = []
    for i in range(2):
        out = tmp_path_factory.mktemp(f"report{i}")
        (out / "calibration.md").write_text("someone else's report\n")
        assert main(["report", "--traces", trace_files["gsm8k"], trace_files["cnndm"],
                     "--out", str(out), *ARGS, *profile_args(any_profiles)]) == 0
        outs.append(out)
    return outs


def files_of(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.slow(10)   # with the module fixture: two quick reports
def test_outputs_are_deterministic_and_only_ours(two_runs):
    a, b = (files_of(o) for o in two_runs)
    expected = {"index.md", "report-args.json", "calibration.md", "tables/check-slice.csv"}
    for t in ("gsm8k", "cnndm"):
        expected |= {f"tables/{t}-replays.csv", f"tables/{t}-table5.csv", f"tables/{t}-prefetch.csv"}
        expected |= {f"figures/{t}-{f}.png" for f in FIGS}
    assert set(a) == expected
    assert a["calibration.md"] == b"someone else's report\n"  # never touched

    # the index and the tables record where the report came from, not when
    def strip(d):
        return {k: v.replace(str(two_runs[0]).encode(), b"OUT").replace(str(two_runs[1]).encode(), b"OUT")
                for k, v in d.items()}

    assert strip(a) == strip(b)
    for k in a:
        if k.endswith(".png"):
            assert a[k][:8] == b"\x89PNG\r\n\x1a\n"


def test_index_labels_synthetic_and_embeds_every_figure(two_runs, trace_files):
    text = (two_runs[0] / "index.md").read_text()
    assert text.count("SYNTHETIC") >= 10
    for heading in [line for line in text.splitlines() if line.startswith("### ")]:
        assert heading.endswith("(SYNTHETIC)"), heading
    for t in ("gsm8k", "cnndm"):
        for f in FIGS:
            assert f"](figures/{t}-{f}.png)" in text
    args = json.loads((two_runs[0] / "report-args.json").read_text())
    assert args["settings"]["requests"] == 3 and args["synthetic"] is True
    assert args["traces"] == [trace_files["gsm8k"], trace_files["cnndm"]]
    assert "simmoe report --traces" in text and "--requests 3" in args["command"]
    assert "the first 3 of 3" in text


def test_published_beside_simulated_with_roles(two_runs):
    text = (two_runs[0] / "index.md").read_text()
    gsm, cnn = text.split("## cnndm")
    assert "Table 3 analogue" in gsm and "**fit**" in gsm
    assert "(10.79)" in gsm and "(7.08)" in gsm          # SpecFit decode TPS, Figure 3
    assert "Table 2 analogue" in cnn and "(8.27)" in cnn  # SpecFit decode TPS, Figure 2
    assert "(2.54 fit)" in cnn and "(49.7 fit)" in cnn    # CNN/DM's fitted workload figures
    assert "(21.6)" in cnn and "(373.6)" in cnn           # Figure 4 (validate) on CNN/DM only
    assert "(21.6)" not in gsm
    assert "(6.70)" in gsm and "(6.70)" not in cnn        # Table 4 on GSM8K
    assert "(2.26)" in gsm                                # route predictor at a = 0.6
    # the paper's cycle counts count every request: not beside a 3-request slice
    assert "(4407)" not in text and "(17791)" not in text


def test_tables_hold_the_index_numbers(two_runs):
    out = two_runs[0]
    df = pd.read_csv(out / "tables" / "gsm8k-replays.csv")
    text = (out / "index.md").read_text()
    row = df[(df["experiment"] == "main") & (df["selector"] == "specfit") & (df["cache"] == "lru")].iloc[0]
    assert f"| SpecFit | 48 lru | {row['decode_tps']:.2f} (10.79)" in text
    t5 = pd.read_csv(out / "tables" / "gsm8k-table5.csv").iloc[0]
    assert f"| λ* − Θ (% of λ*) | {t5['lambda_star_minus_theta_pct']:.2f} | 0.95 |" in text
    assert df["synthetic"].all()


def test_check_slice_is_the_table_part_on_the_first_requests(two_runs, trace_files, any_profiles):
    from simmoe.report.experiments import ReportSettings, check_rows
    from simmoe.trace.io import read_trace

    ref = pd.read_csv(two_runs[0] / "tables" / "check-slice.csv")
    settings = ReportSettings(requests=3, **any_profiles)
    got = pd.concat([check_rows(read_trace(p), p, settings) for p in trace_files.values()],
                    ignore_index=True)
    assert set(ref["experiment"]) == {"main", "slots", "rtx4090"}
    assert (ref["requests_limit"] == 2).all()
    pd.testing.assert_frame_equal(got, ref, check_dtype=False, rtol=1e-12)


def test_bad_input_is_one_line_and_leaves_nothing(trace_files, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    bad = tmp_path / "broken.parquet"
    bad.write_bytes(b"not parquet")
    cases = [
        (["--traces", str(tmp_path / "missing.parquet")], "no such trace file"),
        (["--traces", trace_files["gsm8k"], "--requests", "0"], "--requests"),
        (["--traces", trace_files["gsm8k"], trace_files["gsm8k"]], "same file name"),
        (["--traces", trace_files["gsm8k"], "--hardware", "nonesuch"], "unknown hardware profile"),
        (["--traces", trace_files["gsm8k"], str(bad)], "broken.parquet"),
    ]
    for argv, msg in cases:
        assert main(["report", *argv, "--out", str(out), "--quiet"]) == 2, argv
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1, err
    assert list(out.iterdir()) == []  # the failed runs wrote nothing
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["report", "--traces", trace_files["gsm8k"], "--out", str(afile), "--quiet"]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_a_profile_of_another_model_is_refused_before_any_replay(trace_files, any_profiles, tmp_path, capsys,
                                                                 monkeypatch):
    from factories import random_trace

    from simmoe.report import experiments
    from simmoe.report.experiments import ReportSettings, check_models
    from simmoe.trace.io import read_trace, write_trace

    qwen, olmoe = str(tmp_path / "qwen.parquet"), tmp_path / "olmoe.parquet"
    # Qwen3-30B-A3B's geometry (the shipped profiles' model) and OLMoE-1B-7B's
    for path, (L, N, k) in ((qwen, (48, 128, 8)), (olmoe, (16, 64, 8))):
        write_trace(random_trace(5, num_requests=1, output_len=(3, 4), pool_nodes=2, L=L, N=N, k=k), path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "index.md").write_text("the previous report\n")
    olmoe_gpu = "olmoe-1b-7b@a100-pcie-40gb+pcie4-x16"
    cases = [
        ([str(olmoe)], [], f"{olmoe}: profile a100-pcie-40gb (--hardware) describes a 48-layer model"),
        ([qwen, str(olmoe)], [], f"{olmoe}: profile a100-pcie-40gb (--hardware)"),    # the first trace matches
        ([qwen], ["--hardware", olmoe_gpu], f"{qwen}: profile {olmoe_gpu} (--hardware) is OLMoE"),
        ([str(olmoe)], ["--hardware", olmoe_gpu], f"{olmoe}: profile rtx4090-24gb (--hardware-rtx)"),
        ([trace_files["gsm8k"]], ["--hardware", any_profiles["hardware"], "--hardware-rtx", "rtx4090-24gb"],
         f"{trace_files['gsm8k']}: profile rtx4090-24gb (--hardware-rtx) describes a 48-layer model"),
    ]
    def no_replay(*a, **k):
        raise AssertionError("replayed before every trace was checked")

    monkeypatch.setattr(experiments, "replay_all", no_replay)
    for traces, flags, msg in cases:
        assert main(["report", "--traces", *traces, *flags, "--out", str(out), "--quiet"]) == 2, (traces, flags)
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1, err
    assert [p.name for p in out.iterdir()] == ["index.md"]            # nothing written, no staging folder
    assert (out / "index.md").read_text() == "the previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["olmoe.parquet", "out", "qwen.parquet"]
    # the trace's own model passes: physical profiles of OLMoE, and profiles that state no geometry
    trace = read_trace(olmoe)
    check_models(trace, str(olmoe), ReportSettings(hardware=olmoe_gpu, hardware_rtx="olmoe-1b-7b@rtx4090+pcie4-x16"))
    check_models(trace, str(olmoe), ReportSettings(**any_profiles))


def test_quick_report_has_every_table_and_figure_on_reduced_grids(trace_files, tmp_path, capsys, any_profiles):
    from simmoe.report.experiments import QUICK, ReportSettings

    out = tmp_path / "q"
    assert main(["report", "--traces", trace_files["gsm8k"], trace_files["cnndm"], "--out", str(out),
                 "--quick", "--workers", "1", *profile_args(any_profiles)]) == 0
    err = capsys.readouterr().err.splitlines()
    # not a terminal: one line per step (7 per trace), none per configuration
    assert len(err) == 14 and not any("configurations" in ln for ln in err), err
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    for t in ("gsm8k", "cnndm"):
        assert {f"figures/{t}-{f}.png" for f in FIGS} <= files
    args = json.loads((out / "report-args.json").read_text())
    settings = ReportSettings.from_dict(args["settings"])
    assert settings.quick and settings.requests == 1 and settings.prefetch_slots == QUICK["prefetch_slots"]
    assert "--requests 1 " in args["command"] and args["command"].endswith(" --quick")
    assert f"--hardware-rtx {any_profiles['hardware_rtx']}" in args["command"]
    assert settings.hardware_rtx == any_profiles["hardware_rtx"]
    index = (out / "index.md").read_text()
    assert "**QUICK**" in index
    pre = pd.read_csv(out / "tables" / "gsm8k-prefetch.csv")
    assert set(pre["slots"]) == set(QUICK["prefetch_slots"])
    assert set(pre["route_accuracy"]) == set(QUICK["prefetch_accuracies"])
    rep = pd.read_csv(out / "tables" / "gsm8k-replays.csv")
    assert set(rep[rep["experiment"] == "slots"]["slots"]) == set(QUICK["slot_sweep"])


def test_settings_of_an_older_report_read_with_the_full_grids():
    from simmoe.report.experiments import ReportSettings

    d = ReportSettings().to_dict()
    for k in ("prefetch_accuracies", "prefetch_slots", "batches", "quick"):
        d.pop(k)
    assert ReportSettings.from_dict(d) == ReportSettings()
