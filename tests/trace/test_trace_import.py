"""Importing routing logs: small crafted logs with gaps, shuffled rows, bad records; the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.errors import SimmoeError, TraceError
from simmoe.trace.importer import RouteColumns, import_routes
from simmoe.trace.io import read_trace

ROOT = Path(__file__).resolve().parents[2]


def make_log(rng, requests=2, tokens=(3, 5), L=3, N=16, k=2, start=0):
    """Records as dicts and the truth {(request, token): [L, k] sorted experts}."""
    records, truth = [], {}
    for r in range(requests):
        for t in range(start, start + int(rng.integers(tokens[0], tokens[1] + 1))):
            routes = np.sort(np.stack([rng.choice(N, k, replace=False) for _ in range(L)]), axis=1)
            truth[(f"q{r}", t)] = routes
            for layer in range(L):
                records.append(
                    {
                        "request_id": f"q{r}",
                        "token_idx": t,
                        "layer": layer,
                        "experts": [int(x) for x in rng.permutation(routes[layer])],
                    }
                )
    return records, truth


def write_jsonl(records, path):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def check_against_truth(trace, truth, dropped=()):
    kept = {key: v for key, v in truth.items() if key not in dropped}
    by_request: dict[str, list] = {}
    for (req, _tok), routes in sorted(kept.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        by_request.setdefault(req, []).append(routes)
    assert sorted(trace.requests.request_id) == sorted(by_request)
    for r, req in enumerate(trace.requests.request_id):
        a, b = trace.request_positions(r)
        assert b - a == len(by_request[req])
        assert trace.pos_index[a:b].tolist() == list(range(b - a))
        assert np.array_equal(trace.root_routes[a:b], np.stack(by_request[req]))


def test_jsonl_in_any_order(tmp_path):
    rng = np.random.default_rng(0)
    records, truth = make_log(rng)
    records = [records[i] for i in rng.permutation(len(records))]
    trace, report = import_routes(write_jsonl(records, tmp_path / "log.jsonl"))
    check_against_truth(trace, truth)
    first_seen = list(dict.fromkeys(r["request_id"] for r in records))
    assert list(trace.requests.request_id) == first_seen  # trace order: first appearance in the log
    assert report.missing_cells == 0 and trace.num_nodes == 0
    assert trace.meta["provenance"]["kind"] == "imported"
    assert trace.meta["provenance"]["source"] == "log.jsonl"
    g = trace.geometry
    assert (g.num_layers, g.top_k) == (3, 2) and g.num_experts <= 16


def test_csv_with_custom_columns_and_expert_spellings(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text('req,pos,blk,chosen\na,0,1,"[5, 1]"\na,0,0,3 4\na,1,0,"0;7"\na,1,1,"2,6"\n')
    trace, _ = import_routes(
        path, columns=RouteColumns("req", "pos", "blk", "chosen"), num_experts=8
    )
    assert trace.root_routes.tolist() == [[[3, 4], [1, 5]], [[0, 7], [2, 6]]]
    assert trace.geometry.num_experts == 8


def test_parquet_with_token_ids_and_prefill(tmp_path):
    rows = {
        "request_id": ["x"] * 6,
        "token_idx": [0, 0, 1, 1, 2, 2],
        "layer": [0, 1, 0, 1, 0, 1],
        "experts": [[1, 2], [3, 4], [5, 6], [7, 0], [1, 3], [2, 4]],
        "tid": [11, 11, 12, 12, 13, 13],
        "prompt": [True, True, False, False, False, False],
    }
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table(rows), path)
    cols = RouteColumns(token_id="tid", prefill="prompt")
    trace, report = import_routes(path, columns=cols, num_experts=8)
    assert trace.num_positions == 2 and trace.root_token.tolist() == [12, 13]
    assert trace.requests.prompt_len.tolist() == [1]
    assert np.flatnonzero(trace.requests.prefill_union[0, 0]).tolist() == [1, 2]
    assert np.flatnonzero(trace.requests.prefill_union[0, 1]).tolist() == [3, 4]
    assert report.prefill_records == 2


@settings(max_examples=30)
@given(
    seed=st.integers(0, 10_000),
    drop_cells=st.integers(0, 6),
    drop_tokens=st.integers(0, 2),
    start=st.sampled_from([0, 7]),
)
def test_gaps_are_counted_and_dropped_never_filled(
    tmp_path_factory, seed, drop_cells, drop_tokens, start
):
    rng = np.random.default_rng(seed)
    records, truth = make_log(rng, requests=3, tokens=(3, 6), L=3, start=start)
    # Remove single cells and whole interior tokens; first/last tokens keep at least one layer.
    removed_tokens = set()
    keys = sorted(truth)
    interior = [key for key in keys if start < key[1] < max(t for (r, t) in keys if r == key[0])]
    for key in rng.permutation(len(interior))[:drop_tokens]:
        removed_tokens.add(interior[key])
    records = [r for r in records if (r["request_id"], r["token_idx"]) not in removed_tokens]
    removed_cells = set()
    for i in rng.permutation(len(records))[:drop_cells]:
        rec = records[i]
        if rec["layer"] != 0:  # keep layer 0 so the token itself is still seen
            removed_cells.add((rec["request_id"], rec["token_idx"], rec["layer"]))
    records = [
        r for r in records if (r["request_id"], r["token_idx"], r["layer"]) not in removed_cells
    ]
    records = [records[i] for i in rng.permutation(len(records))]
    path = write_jsonl(records, tmp_path_factory.mktemp("g") / "log.jsonl")
    missing = 3 * len(removed_tokens) + len(removed_cells)
    incomplete = removed_tokens | {(r, t) for r, t, _ in removed_cells}
    if missing:
        with pytest.raises(SimmoeError, match=f"{missing} \\(token, layer\\) cells have no routes"):
            import_routes(path)
    trace, report = import_routes(path, on_gap="drop")
    assert report.missing_cells == missing
    assert report.dropped_tokens == len(incomplete)
    assert trace.meta["provenance"]["dropped_tokens"] == len(incomplete)
    check_against_truth(trace, truth, dropped=incomplete)


@pytest.mark.parametrize(
    "mutate,field,match",
    [
        (lambda rs: rs.append(dict(rs[4])), "layer", "second record"),
        (lambda rs: rs[3].update(experts=[2, 2]), "experts", "listed twice"),
        (lambda rs: rs[5].update(experts=[1, 2, 3]), "experts", "3 experts, expected 2"),
        (lambda rs: rs[2].update(experts=[1, -4]), "experts", "negative expert id"),
        (lambda rs: rs[1].update(layer=-1), "layer", "negative layer"),
        (lambda rs: rs[6].update(token_idx=-2), "token_idx", "negative token"),
        (lambda rs: rs[2].update(experts=None), "experts", "missing value"),
    ],
)
def test_bad_records_name_row_and_field(tmp_path, mutate, field, match):
    records, _ = make_log(np.random.default_rng(3))
    mutate(records)
    with pytest.raises(TraceError, match=match) as e:
        import_routes(write_jsonl(records, tmp_path / "log.jsonl"))
    assert e.value.field == field
    if "second record" not in match:
        assert e.value.row is not None


def test_out_of_range_against_given_geometry(tmp_path):
    records, _ = make_log(np.random.default_rng(4), N=12)
    records[7]["experts"] = [0, 15]
    with pytest.raises(TraceError, match="outside \\[0, 12\\)") as e:
        import_routes(write_jsonl(records, tmp_path / "log.jsonl"), num_experts=12)
    assert (e.value.row, e.value.field) == (7, "experts")
    with pytest.raises(TraceError, match="layer 2 outside"):
        import_routes(write_jsonl(records, tmp_path / "log.jsonl"), num_layers=2)


def test_missing_column_and_unknown_format(tmp_path):
    records, _ = make_log(np.random.default_rng(5))
    path = write_jsonl(records, tmp_path / "log.jsonl")
    with pytest.raises(TraceError, match="missing column") as e:
        import_routes(path, columns=RouteColumns(layer="block"))
    assert e.value.field == "block"
    other = tmp_path / "log.txt"
    other.write_text(path.read_text())
    with pytest.raises(SimmoeError, match="--format"):
        import_routes(other)
    assert import_routes(other, fmt="jsonl")[1].records == len(records)


def run_cli(*argv):
    return subprocess.run(
        [sys.executable, "-m", "simmoe", *argv], capture_output=True, text=True, cwd=ROOT
    )


def test_cli_writes_an_imported_trace(tmp_path):
    records, truth = make_log(np.random.default_rng(6))
    src = write_jsonl(records, tmp_path / "log.jsonl")
    out = tmp_path / "t.parquet"
    res = run_cli(
        "import-routes", str(src), "--out", str(out), "--num-experts", "16", "--model-name", "m"
    )
    assert res.returncode == 0, res.stderr
    trace = read_trace(out)
    check_against_truth(trace, truth)
    assert trace.meta["provenance"]["source"] == "log.jsonl" and trace.geometry.name == "m"


def test_cli_gap_fails_with_one_line_and_writes_nothing(tmp_path):
    records, _ = make_log(np.random.default_rng(7))
    del records[4]
    src = write_jsonl(records, tmp_path / "log.jsonl")
    out = tmp_path / "t.parquet"
    res = run_cli("import-routes", str(src), "--out", str(out))
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "1 (token, layer) cells have no routes" in res.stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["log.jsonl"]
    res = run_cli("import-routes", str(src), "--out", str(out), "--on-gap", "drop")
    assert res.returncode == 0 and "dropped 1 incomplete tokens" in res.stderr
    assert read_trace(out).meta["provenance"]["missing_cells"] == 1


def test_cli_requires_out(tmp_path):
    res = run_cli("import-routes", str(tmp_path / "x.jsonl"))
    assert res.returncode == 2 and "--out" in res.stderr


def test_parquet_fixed_size_lists_and_integer_request_ids(tmp_path):
    table = pa.table(
        {
            "request_id": [7, 7, 3, 3],
            "token_idx": [0, 0, 0, 0],
            "layer": [0, 1, 0, 1],
            "experts": pa.array([[1, 2], [3, 0], [4, 5], [6, 7]], pa.list_(pa.int16(), 2)),
        }
    )
    pq.write_table(table, tmp_path / "log.parquet")
    trace, _ = import_routes(tmp_path / "log.parquet")
    assert list(trace.requests.request_id) == ["7", "3"]
    assert trace.root_routes.tolist() == [[[1, 2], [0, 3]], [[4, 5], [6, 7]]]
