"""reports/cpu-experts.md: its structure, its figures, bad flags in one line, nothing half-written."""

from __future__ import annotations

import itertools

import pytest

from simmoe.errors import SimmoeError
from simmoe.report import cpu_experts as ce
from simmoe.report import cpu_experts_render as render

PNG = b"\x89PNG\r\n\x1a\n"


def fake_rows() -> tuple[list[dict], dict, list[dict]]:
    """Rows as run_model returns them, for every model × system, one refused; numbers made up per cell."""
    rows, ck, facts = [], {}, []
    for i, (model, system) in enumerate(itertools.product(ce.MODELS, (s[0] for s in ce.SYSTEMS))):
        base = {"model": model, "system": system, "status": "ok", "reason": "", "mat": 2.0 + i / 10,
                "ms_cycle": 10.0 + i, "cpu_reads": 4.0, "cpu_ms": 5.0, "gpu_ms": 2.0, "dram_gb": 0.1,
                "gpu_share": 0.5, "copies": 0.0, "mib": 100.0}
        rows.append({**base, "kind": "layers", "placement": "cpu-layers:0", "x": 0, "slots": 0, "selector": "ar",
                     "status": "refused", "reason": "the GPU's part takes 9.5 GiB"})
        for n in (10, 20, 36):
            rows.append({**base, "kind": "layers", "placement": f"cpu-layers:{n}", "x": n, "slots": 0,
                         "selector": "ar", "tps": 50.0 - n + i})
        for kind in ("misses", "fiddler"):
            for s in (4, 8):
                rows.append({**base, "kind": kind, "placement": "cpu-misses" if kind == "misses" else "fiddler",
                             "x": s, "slots": s, "selector": "ar", "tps": 30.0 + s, "mib": 10.0 * s})
        for sel, tps in zip(ce.SELECTORS, (40.0, 30.0, 45.0, 50.0, 41.0), strict=True):
            rows.append({**base, "kind": "spec", "placement": "cpu-all", "x": 0, "slots": 0, "selector": sel,
                         "tps": tps, "ms_cycle": 10.0 if sel == "ar" else 30.0, "cpu_reads": 4.0 + (sel != "ar")})
        ck[(model, system, "cpu-all")] = (10.0, 12.5, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0)
        if system == "hedt":
            facts.append({"model": model, "name": model.upper(), "L": 4, "N": 8, "k": 2, "requests": 1,
                          "tokens": 9, "synthetic": True, "K": 7, "max_nodes": 9})
    return rows, ck, facts


def test_every_model_and_system_has_its_section_with_labels_and_the_fitted_term():
    rows, ck, facts = fake_rows()
    text = render.render(rows, ck, facts, ce.Setting(), "python -m simmoe.report.cpu_experts", 60.0, "figures")
    for f in facts:
        assert f"## {f['name']} (Q4_K_M; SYNTHETIC trace, predicted)" in text
        assert f"figures/cpu-experts-{f['model']}-layers.png" in text
        assert f"figures/cpu-experts-{f['model']}-cache.png" in text
        for key, _label, _gpu, _cpu in ce.SYSTEMS:
            assert f"### {f['model']} on the {render._system_text(key)} (SYNTHETIC, predicted)" in text
    assert "fitted term is η_mem" in text and "llmfit PR #755" in text
    assert "| cpu-layers:0 | refused | the GPU's part takes 9.5 GiB |" in text
    # the answer is computed from the rows: EAGLE-3 at 30 vs AR 40 is slower, SpecFit at 50 recovers 1.25x
    assert "Speculation is slower than AR in 9 of 36 runs" in text
    assert "EAGLE-3 in `cpu-all` is 0.75× AR; SpecFit recovers 1.25× AR" in text
    assert "C(2)/C(1) across the placements: 1.25–1.25" in text
    assert "| `cpu-all` | 40.0 | 30.0 (0.75×, " in text
    # the fitted figure's row says so, once: Qwen3-30B-A3B on the HEDT at --n-cpu-moe 36, 36.7 published
    assert text.count("η_mem fitted here to 36.7") == 1


def test_a_model_that_fits_no_placement_is_one_refusal_line():
    rows, ck, facts = fake_rows()
    why = "DeepSeek-V3 takes 375.9 GiB, more than host RAM + GPU memory"
    rows = [r if r["system"] != "desktop" else {**r, "status": "refused", "reason": why} for r in rows]
    text = render.render(rows, ck, facts, ce.Setting(), "cmd", 1.0, "figures")
    assert text.count(f"Every placement refused: {why}.") == len(facts)


def test_quick_run_writes_the_report_and_its_figures(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ce, "SELECTORS", ("ar", "eagle3"))
    monkeypatch.setattr(ce, "QUICK_CACHE_FRACTIONS", (1 / 8,))
    monkeypatch.setattr(ce, "_setting", lambda args: ce.Setting(quick=True, models=("deepseek-v2-lite",),
                                                              systems=("hedt",), requests=1, tokens=8))
    out = tmp_path / "cpu.md"
    assert ce.main(["--out", str(out), "--quick", "--no-progress"]) == 0
    text = out.read_text()
    assert "SYNTHETIC" in text and "η_mem" in text
    # DeepSeek-V2-Lite's GPU part does not fit an RTX 2080 without CPU layers: refused with the reason
    assert "| cpu-layers:0 | refused | the GPU's part of DeepSeek-V2-Lite" in text
    assert "| cpu-layers:6 | " in text          # the fewest that fit, found and replayed
    figs = sorted(p.name for p in (tmp_path / "figures").iterdir())
    assert figs == ["cpu-experts-deepseek-v2-lite-cache.png", "cpu-experts-deepseek-v2-lite-layers.png"]
    assert all((tmp_path / "figures" / f).read_bytes().startswith(PNG) for f in figs)
    assert "wrote" in capsys.readouterr().err


@pytest.mark.parametrize("argv, what", [
    (["--bogus"], "unrecognized arguments"),
    (["--systems", "laptop"], "--systems 'laptop'"),
    (["--models", "no-such-model"], "no-such-model"),
    (["--out", "{tmp}/missing/cpu.md"], "--out"),
    (["--out", "{tmp}/cpu.txt"], "--out"),
])
def test_bad_flags_are_one_line_and_write_nothing(tmp_path, capsys, argv, what):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "cpu.md")]
    try:
        rc = ce.main(argv)
    except SystemExit as exc:           # the parser's usage errors
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and what in err
    assert list(tmp_path.iterdir()) == []


def test_a_failure_mid_run_leaves_nothing_half_written(tmp_path, monkeypatch, capsys):
    def boom(model, setting, progress=None):
        raise SimmoeError(f"{model}: refused half-way")

    monkeypatch.setattr(ce, "run_model", boom)
    assert ce.main(["--out", str(tmp_path / "cpu.md"), "--quick", "--no-progress"]) == 2
    assert capsys.readouterr().err.strip().endswith("refused half-way")
    assert list(tmp_path.iterdir()) == []
