"""The validation report (simmoe/validation/published/): subsets, rows, roles, determinism, CLI errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
from factories import random_trace
from hypothesis import given
from hypothesis import strategies as st

from simmoe.errors import SimmoeError
from simmoe.trace.validate import validate_trace
from simmoe.validation.published import (
    GOALS,
    Row,
    main,
    odd_numbered,
    published,
    role_of,
    select_requests,
)


# --------------------------------------------------------------------------
# request subsets
# --------------------------------------------------------------------------
def _request_fields(trace, r):
    lo, hi = trace.request_positions(r)
    nlo, nhi = int(trace.node_ptr[lo]), int(trace.node_ptr[hi])
    ptr = trace.node_ptr[lo:hi + 1] - trace.node_ptr[lo]
    rq = trace.requests
    return {
        "prompt_len": rq.prompt_len[r], "output_len": rq.output_len[r], "id": rq.request_id[r],
        "prefill": rq.prefill_union[r], "pos_index": trace.pos_index[lo:hi],
        "root_token": trace.root_token[lo:hi], "root_routes": trace.root_routes[lo:hi], "ptr": ptr,
        "parent": trace.node_parent[nlo:nhi], "level": trace.node_level[nlo:nhi],
        "p": trace.node_p[nlo:nhi], "q": trace.node_q[nlo:nhi], "agree": trace.node_agree[nlo:nhi],
        "routes": trace.node_routes[nlo:nhi], "token": trace.node_token[nlo:nhi],
    }


@given(seed=st.integers(0, 10_000), n=st.integers(1, 5), data=st.data())
def test_select_requests_keeps_each_request_intact(seed, n, data):
    trace = random_trace(seed, num_requests=n, pool_nodes=data.draw(st.sampled_from([0, 4, 7])))
    index = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1)))
    sub = select_requests(trace, index)
    validate_trace(sub)
    assert len(sub.requests) == len(index)
    assert sub.meta["subset"] == index
    for j, r in enumerate(index):
        a, b = _request_fields(sub, j), _request_fields(trace, r)
        for key in a:
            assert np.array_equal(a[key], b[key]), key


def test_select_requests_rejects_bad_indices(small_trace):
    for bad in ([], [1, 0], [0, 0], [-1], [len(small_trace.requests)]):
        with pytest.raises(SimmoeError):
            select_requests(small_trace, bad)


def test_odd_numbered_equals_the_generators_subset():
    """The 1st, 3rd, ... request of a preset trace is the generator's own request of that index."""
    from simmoe.synth import generate, preset

    params = preset("gsm8k").params
    full = generate(params, seed=3, num_requests=4)
    odd = odd_numbered(full)
    ref = generate(params, seed=3, subset=[0, 2])
    assert list(odd.requests.request_id) == list(ref.requests.request_id)
    for name in ("root_routes", "node_ptr", "node_parent", "node_p", "node_agree", "node_routes"):
        assert np.array_equal(getattr(odd, name), getattr(ref, name)), name
    assert np.array_equal(odd.requests.prefill_union, ref.requests.prefill_union)


# --------------------------------------------------------------------------
# rows: errors, goals, roles
# --------------------------------------------------------------------------
def test_row_error_and_goal_status():
    ms = Row("s", "specfit.table2_cnndm_a100", "validate", "x", 200.0, 219.0, "rel", "ms")
    assert ms.error == pytest.approx(9.5) and ms.status == "PASS"
    ms.simulated = 221.0
    assert ms.error == pytest.approx(10.5) and ms.status == "MISS"
    gain = Row("s", "specfit.figure4_slot_sweep_cnndm_a100", "validate", "g", 21.6, 16.0, "pp", "gain")
    assert gain.error == pytest.approx(-5.6) and gain.status == "MISS"
    gain.simulated = 26.5
    assert gain.status == "PASS"
    trend = Row("s", "specfit.figure4_slot_sweep_cnndm_a100", "validate", "t", "increasing",
                "not increasing", "", "trend")
    assert trend.error is None and trend.status == "MISS"
    # a fit row never gets a goal status, whatever its error
    fit = Row("s", "specfit.table3_gsm8k_a100", "fit", "x", 100.0, 500.0, "rel", "ms")
    assert fit.status == ""
    nan = Row("s", "specfit.table2_cnndm_a100", "validate", "x", 1.0, float("nan"), "rel", "h2d")
    assert nan.error is None and nan.status == "MISS"


def test_role_of_follows_published_json():
    pub = published()
    assert role_of(pub, "specfit.table3_gsm8k_a100") == "fit"
    assert role_of(pub, "specfit.table2_cnndm_a100") == "validate"
    assert role_of(pub, "specfit.table2_cnndm_a100", "eagle3 committed (2.54)") == "fit"
    assert role_of(pub, "evict.table4_step_latency_ms") == "fit"
    with pytest.raises(SimmoeError):
        role_of(pub, "specfit.table2_cnndm_a100", "something not listed")


# --------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------
@pytest.mark.parametrize("argv, text", [
    (["--out", "/nonexistent-folder/v.md"], "does not exist"),
    (["--evict-requests", "3"], "--evict-requests"),
    (["--evict-requests", "0,2"], "at least 1"),
    (["--traces", "/nonexistent-folder"], "not a folder"),
    (["--workers", "0"], "--workers"),
])
def test_bad_arguments_give_one_line_and_status_2(tmp_path, capsys, argv, text):
    if "--out" not in argv:
        argv = argv + ["--out", str(tmp_path / "v.md")]
    assert main(argv + ["--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and text in err
    assert not list(tmp_path.iterdir())  # nothing written


def _table_rows(section: str):
    """(quantity, published, simulated, source, role) of every markdown table row in a section."""
    out = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and "`" in line and len(cells) >= 6:
            out.append((cells[0], cells[1], cells[2], cells[-2].strip("`"), cells[-1]))
    return out


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """Two quick runs: the API generates the traces into a cache folder in this process, the command reads
    them back and replays in two worker processes (its default), so equal reports also mean that the
    worker count changes nothing.

    Returns the first run's ``Predictions`` and both reports.
    """
    from simmoe.validation.published import Settings, render_markdown, run_predictions

    folder = tmp_path_factory.mktemp("validation")
    cache = folder / "cache"
    pred = run_predictions(Settings(quick=True, workers=1, cache_dir=str(cache)))
    first = render_markdown(pred, f"python -m simmoe.validation.published --out {folder / 'a.md'} --quick")
    from simmoe.validation.published.physical_runs import BENCHES, MODELS, workload_name

    physical = {workload_name(m, b) for m in MODELS for b in BENCHES} | {
        workload_name("qwen3-30b-a3b", b, table6=True) for b in ("qa", "humaneval")}
    physical |= {workload_name(m, "qa") + "-lookahead" for m in ("qwen3-30b-a3b", "ling-flash-2.0", "qwen3-235b-a22b")}
    physical |= {workload_name("qwen3-30b-a3b", b, table6=True) + "-dflash" for b in ("qa", "humaneval")}
    files = sorted(p.name for p in cache.iterdir())
    assert sorted(f.split("-seed")[0] for f in files) == sorted(
        {"cnndm", "cnndm-evict", "gsm8k", "gsm8k-evict"} | physical)
    assert main(["--out", str(folder / "b.md"), "--quick", "--quiet", "--cache-dir", str(cache)]) == 0
    assert sorted(p.name for p in cache.iterdir()) == files        # the second run read every trace back
    second = (folder / "b.md").read_text()
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    return pred, (first, second)


@pytest.fixture(scope="module")
def quick_reports(quick_run):
    return quick_run[1]


def _without_command(text: str) -> str:
    return "\n".join(line for line in text.rstrip("\n").splitlines() if not line.startswith("Regenerate:"))


@pytest.mark.slow(60)   # with the module fixture: two quick runs of the report
def test_quick_runs_are_deterministic(quick_reports):
    a, b = quick_reports
    assert _without_command(a) == _without_command(b)
    assert re.search(r"\d", a)


@pytest.mark.slow(60)
def test_report_structure_and_roles(quick_reports):
    text = quick_reports[0]
    pub = published()
    assert text.startswith("# Validation") and "SYNTHETIC" in text.splitlines()[0]
    assert "QUICK RUN" in text and "Regenerate: `python -m simmoe.validation.published" in text
    val_start = text.index("## Validation set")
    fit_start = text.index("## Fit set")
    counters = text.index("## Counters of every replay")
    assert val_start < fit_start < counters
    validation, fit = text[val_start:fit_start], text[fit_start:counters]
    for heading in ("Table 2", "Figure 4", "Adaptive depth", "Table 5", "Route predictor",
                    "RTX 4090", "EVICT"):
        assert heading in validation, heading
    vrows, frows = _table_rows(validation), _table_rows(fit)
    assert len(vrows) > 100 and len(frows) > 20
    # every row's role is the one published.json gives its figure (fit_only entries are fit)
    for _, _, _, source, role in vrows:
        assert role == "validate" == role_of(pub, source), source
    for _quantity, _, _, source, role in frows:
        assert role == "fit"
        assert role_of(pub, source) == "fit" or pub[source.split(".")[0]][source.split(".")[1]].get("fit_only")
    # every figure marked validate in published.json has rows in the validation set
    wanted = {f"{paper}.{key}" for paper in ("specfit", "evict") for key, v in pub[paper].items()
              if isinstance(v, dict) and v.get("role") == "validate"}
    assert wanted <= {r[3] for r in vrows}
    # goals table: every goal has rows, and PASS + MISS = rows
    goals = text[text.index("## Goals"):val_start]
    for gid in GOALS:
        m = re.search(rf"^\| {gid} \| .* \| (\d+) \| (\d+) \| (\d+) \|$", goals, re.M)
        assert m and int(m[1]) == int(m[2]) + int(m[3]) and int(m[1]) > 0, gid
    # EVICT's sections with missed goals say why, from the run's numbers
    assert "**Why the misses** (computed from this run):" in validation
    assert "EVICT's gain over EAGLE-3 = its Mat ratio" in validation
    statuses = re.findall(r"\| (PASS|MISS) \|", validation)
    assert len(statuses) == sum(int(re.search(rf"^\| {g} \| .* \| (\d+) \| \d+ \| \d+ \|$", goals, re.M)[1])
                                for g in GOALS)


@pytest.mark.slow(60)
def test_lookahead_and_dflash_rows_in_the_quick_report(quick_reports):
    """Lookahead and DFlash are simulated: fitted rows in the fit set, predicted ones with goals."""
    text = quick_reports[0]
    assert "not simulated" not in text
    val_start, fit_start = text.index("## Validation set"), text.index("## Fit set")
    bare = lambda rows: [(re.sub("[⁰¹²³⁴⁵⁶⁷⁸⁹ ]+$", "", r[0]),) + r[1:] for r in rows]   # noqa: E731 (footnotes)
    vrows = bare(_table_rows(text[val_start:fit_start]))
    frows = bare(_table_rows(text[fit_start:text.index("## Counters of every replay")]))
    assert [r[0] for r in frows if "lookahead" in r[0]] == ["qa: lookahead tokens/s"]
    assert sorted(r[0] for r in frows if "dflash" in r[0]) == ["humaneval, batch 4: dflash tokens/s",
                                                               "qa, batch 4: dflash tokens/s"]
    assert all(r[3] == "evict.fit_in_evict_tables" for r in frows if "lookahead" in r[0] or "dflash" in r[0])
    look = [r for r in vrows if "lookahead" in r[0]]
    assert {r[3] for r in look} == {"evict.table1_qwen3_30b_a3b_t1", "evict.table7_ling_flash_2_0",
                                    "evict.table8_qwen3_235b_a22b"} and len(look) == 5
    dflash = [r for r in vrows if "dflash" in r[0] or "over DFlash" in r[0]]
    assert len(dflash) == 2 * 5 and all(r[3] == "evict.table6_batch_vllm" and r[4] == "validate" for r in dflash)


@pytest.mark.slow(60)
def test_published_values_in_rows_come_from_published_json(quick_run):
    """Rows that point into published.json carry exactly the value found there."""
    pred = quick_run[0]
    pub = published()
    checked = 0
    for r in pred.rows:
        if r.path:
            v = pub
            for k in r.path:
                v = v[k]
            assert float(v) == r.published, (r.quantity, r.path)
            checked += 1
        assert r.role == role_of(pub, r.figure) or r.role == "fit"
    assert checked > 100
    # the fit-only CNN/DM figures are fit rows, their neighbours validate rows
    t2 = [r for r in pred.rows if r.figure == "specfit.table2_cnndm_a100"]
    fit = {r.quantity for r in t2 if r.role == "fit"}
    assert {"EAGLE-3, cache: committed / cycle", "EAGLE-3, no cache: committed / cycle",
            "AR, cache: H2D / token"} <= fit
    assert "SpecFit, cache: committed / cycle" not in fit
    # every run the rows refer to was replayed, and its counters are finite
    for r in pred.rows:
        if r.run is not None:
            assert np.isfinite(pred.runs[r.run].summary["decode_tps"]), r.run


def test_implied_union_inverts_the_no_cache_counters():
    """H2D/token built from a known union and prefill share gives that union back."""
    from simmoe.validation.published import implied_union

    L, k, union, committed, prefill = 48, 8, 21.5, 2.5, 16.7
    ar_h2d = L * k + prefill
    h2d = prefill + union * L / committed
    assert implied_union(h2d, committed, ar_h2d, L, k) == pytest.approx(union)
