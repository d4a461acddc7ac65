"""Every validation error, triggered by a crafted bad file: the error names the file, the row and the field."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from factories import random_trace
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tracefile_helpers import clone, write_table, write_unchecked

from simmoe.errors import TraceError
from simmoe.trace import io as trace_io
from simmoe.trace.io import read_trace
from simmoe.trace.validate import validate_trace


def row_of_node(trace, m):
    return int(np.searchsorted(trace.node_ptr, m, side="right") - 1)


def read_error(trace, tmp_path) -> TraceError:
    path = tmp_path / "bad.parquet"
    write_unchecked(trace, path)
    with pytest.raises(TraceError) as e:
        read_trace(path)
    assert e.value.path == str(path)
    assert str(path) in str(e.value)
    # The in-memory check agrees with the file check.
    with pytest.raises(TraceError) as e2:
        validate_trace(trace)
    assert (e2.value.row, e2.value.field) == (e.value.row, e.value.field)
    return e.value


def deep_node(trace, rng, min_level=1):
    candidates = np.flatnonzero(trace.node_level >= min_level)
    return int(rng.choice(candidates))


seeds = st.integers(0, 10_000)


# ------------------------------------------------------------- structure ---

@settings(max_examples=25)
@given(seed=seeds)
def test_parent_listed_after_child(tmp_path_factory, seed):
    t = clone(random_trace(seed, pool_nodes=8))
    rng = np.random.default_rng(seed)
    m = deep_node(t, rng)
    j = m - t.node_ptr[row_of_node(t, m)]
    t.node_parent[m] = j  # itself: not listed before
    err = read_error(t, tmp_path_factory.mktemp("v"))
    assert (err.row, err.field) == (row_of_node(t, m), "node_parent")
    assert "listed after its child" in str(err)


@settings(max_examples=25)
@given(seed=seeds, delta=st.sampled_from([-1, 1, 2]))
def test_level_inconsistent_with_parent(tmp_path_factory, seed, delta):
    t = clone(random_trace(seed, pool_nodes=8))
    m = deep_node(t, np.random.default_rng(seed))
    t.node_level[m] += delta
    err = read_error(t, tmp_path_factory.mktemp("v"))
    assert (err.row, err.field) == (row_of_node(t, m), "node_level")


# --------------------------------------------------------- probabilities ---

@settings(max_examples=25)
@given(seed=seeds, field=st.sampled_from(["node_q", "node_p"]),
       value=st.sampled_from([-0.1, 1.01, float("nan"), float("inf")]))
def test_probability_outside_unit_interval(tmp_path_factory, seed, field, value):
    t = clone(random_trace(seed))
    m = deep_node(t, np.random.default_rng(seed))
    getattr(t, field)[m] = value
    err = read_error(t, tmp_path_factory.mktemp("v"))
    assert (err.row, err.field) == (row_of_node(t, m), field)
    assert "outside [0, 1]" in str(err)


@settings(max_examples=25)
@given(seed=seeds, factor=st.sampled_from([0.5, 0.9, 1.1]))
def test_path_probability_not_product(tmp_path_factory, seed, factor):
    t = clone(random_trace(seed, pool_nodes=8))
    m = deep_node(t, np.random.default_rng(seed))
    old = float(t.node_p[m])
    t.node_p[m] = np.float32(min(1.0, old * factor))
    assume(abs(float(t.node_p[m]) - old) > 1e-6 + 1e-4 * old)  # p = 1 cannot grow
    # Children of m keep their old p, so m is the first (and reported) inconsistency.
    err = read_error(t, tmp_path_factory.mktemp("v"))
    assert (err.row, err.field) == (row_of_node(t, m), "node_p")
    assert "not q x parent's p" in str(err)


def test_path_probability_within_float32_rounding_passes(small_trace):
    t = clone(small_trace)
    t.node_p = np.nextafter(t.node_p, np.float32(0))  # one ulp off the recorded product
    validate_trace(t)


# ----------------------------------------------------------------- routes ---

@settings(max_examples=25)
@given(seed=seeds, where=st.sampled_from(["root_routes", "node_routes"]), data=st.data())
def test_expert_id_out_of_range(tmp_path_factory, seed, where, data):
    t = clone(random_trace(seed, N=8, k=2))
    routes = getattr(t, where)
    i = data.draw(st.integers(0, len(routes) - 1))
    layer = data.draw(st.integers(0, routes.shape[1] - 1))
    routes[i, layer, -1] = data.draw(st.integers(8, 255))
    err = read_error(t, tmp_path_factory.mktemp("v"))
    assert err.field == where
    assert err.row == (i if where == "root_routes" else row_of_node(t, i))
    assert f"layer {layer}" in str(err) and "outside [0, 8)" in str(err)


@settings(max_examples=25)
@given(seed=seeds, where=st.sampled_from(["root_routes", "node_routes"]), data=st.data())
def test_expert_repeated_within_layer(tmp_path_factory, seed, where, data):
    t = clone(random_trace(seed, N=8, k=3))
    routes = getattr(t, where)
    i = data.draw(st.integers(0, len(routes) - 1))
    layer = data.draw(st.integers(0, routes.shape[1] - 1))
    routes[i, layer, 1] = routes[i, layer, 0]
    err = read_error(t, tmp_path_factory.mktemp("v"))
    assert err.field == where
    assert err.row == (i if where == "root_routes" else row_of_node(t, i))
    assert "repeated" in str(err)


def test_unsorted_routes(tmp_path, small_trace):
    t = clone(small_trace)
    t.root_routes[2, 1] = t.root_routes[2, 1][::-1]
    err = read_error(t, tmp_path)
    assert (err.row, err.field) == (2, "root_routes") and "not sorted" in str(err)


def test_route_array_of_wrong_shape_in_memory(small_trace):
    t = clone(small_trace)
    t.node_routes = t.node_routes[:, :, :1]
    with pytest.raises(TraceError, match="wrong shape") as e:
        validate_trace(t)
    assert e.value.field == "node_routes"


@pytest.mark.parametrize("column", ["root_routes_keep", "node_routes_place", "node_routes_new"])
@given(seed=seeds, data=st.data())
@settings(max_examples=10)
def test_route_blob_of_wrong_length(tmp_path_factory, column, seed, data):
    t = random_trace(seed)
    table = trace_io._to_table(t, "x")
    blobs = table.column(column).to_pylist()
    row = data.draw(st.integers(0, len(blobs) - 1))
    blobs[row] = blobs[row] + b"\x00"
    table = table.set_column(table.schema.get_field_index(column), column, pa.array(blobs, pa.large_binary()))
    path = tmp_path_factory.mktemp("v") / "bad.parquet"
    write_table(table, path)
    with pytest.raises(TraceError, match="wrong shape") as e:
        read_trace(path)
    assert (e.value.row, e.value.field) == (row, column)


# -------------------------------------------------------------- positions ---

@settings(max_examples=25)
@given(seed=seeds, data=st.data())
def test_duplicate_position(tmp_path_factory, seed, data):
    t = clone(random_trace(seed))
    start, end = t.request_positions(0)
    i = data.draw(st.integers(start + 1, end - 1))
    t.pos_index[i] = t.pos_index[i - 1]
    err = read_error(t, tmp_path_factory.mktemp("v"))
    assert (err.row, err.field) == (i, "pos_index") and "duplicate position" in str(err)


@settings(max_examples=25)
@given(seed=seeds, data=st.data())
def test_missing_position(tmp_path_factory, seed, data):
    t = clone(random_trace(seed))
    start, end = t.request_positions(0)
    i = data.draw(st.integers(start, end - 1))
    t.pos_index[i:end] += 1  # position i - start never appears
    err = read_error(t, tmp_path_factory.mktemp("v"))
    assert (err.row, err.field) == (i, "pos_index") and "missing" in str(err)


def test_positions_missing_at_the_end(tmp_path, small_trace):
    t = clone(small_trace)
    t.requests.output_len[1] += 2
    err = read_error(t, tmp_path)
    assert err.field == "requests.output_len" and "missing at the end" in str(err)


def test_rows_not_sorted_by_request(small_trace):
    t = clone(small_trace)
    t.pos_request[0] = 1
    with pytest.raises(TraceError, match="sorted by request") as e:
        validate_trace(t)
    assert e.value.field == "pos_request"


# ------------------------------------------------------------ file level ---

def test_missing_column(tmp_path, small_trace):
    table = trace_io._to_table(small_trace, "x").drop_columns(["node_agree"])
    write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(TraceError, match="missing column") as e:
        read_trace(tmp_path / "bad.parquet")
    assert e.value.field == "node_agree" and e.value.row is None


@pytest.mark.parametrize("column,new_type", [
    ("pos_index", pa.int64()),
    ("node_q", pa.large_list(pa.float64())),
    ("root_routes_new", pa.large_string()),
])
def test_mistyped_column(tmp_path, small_trace, column, new_type):
    table = trace_io._to_table(small_trace, "x")
    col = table.column(column)
    if column == "root_routes_new":
        col = pa.array([b.hex() for b in col.to_pylist()], new_type)
    else:
        col = col.cast(new_type)
    table = table.set_column(table.schema.get_field_index(column), column, col)
    write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(TraceError, match="has type") as e:
        read_trace(tmp_path / "bad.parquet")
    assert e.value.field == column


def test_null_value(tmp_path, small_trace):
    table = trace_io._to_table(small_trace, "x")
    vals = table.column("root_token").to_pylist()
    vals[3] = None
    table = table.set_column(table.schema.get_field_index("root_token"), "root_token", pa.array(vals, pa.int32()))
    write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(TraceError, match="missing value") as e:
        read_trace(tmp_path / "bad.parquet")
    assert (e.value.row, e.value.field) == (3, "root_token")


def test_list_columns_of_different_lengths(tmp_path, small_trace):
    table = trace_io._to_table(small_trace, "x")
    vals = table.column("node_token").to_pylist()
    vals[4] = vals[4][:-1]
    table = table.set_column(table.schema.get_field_index("node_token"), "node_token",
                             pa.array(vals, pa.large_list(pa.int32())))
    write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(TraceError) as e:
        read_trace(tmp_path / "bad.parquet")
    assert (e.value.row, e.value.field) == (4, "node_token")


@pytest.mark.parametrize("version", [0, 3, "1", None, True])
def test_unknown_schema_version(tmp_path, small_trace, version):
    table = trace_io._to_table(small_trace, "x")
    write_table(table, tmp_path / "bad.parquet", header_edit=lambda h: h.update(schema_version=version))
    with pytest.raises(TraceError, match="unknown schema version") as e:
        read_trace(tmp_path / "bad.parquet")
    assert e.value.field == "schema_version"


def test_unknown_schema_version_in_memory(small_trace):
    t = clone(small_trace)
    t.meta["schema_version"] = 7
    with pytest.raises(TraceError, match="unknown schema version"):
        validate_trace(t)


def test_bad_request_table(tmp_path, small_trace):
    table = trace_io._to_table(small_trace, "x")
    write_table(table, tmp_path / "bad.parquet",
                header_edit=lambda h: h["requests"]["prompt_len"].append(3))
    with pytest.raises(TraceError, match="entries for 2 requests") as e:
        read_trace(tmp_path / "bad.parquet")
    assert e.value.field == "requests.prompt_len"


def test_bad_provenance_and_prefill_shape(small_trace):
    t = clone(small_trace)
    t.meta["provenance"] = {"kind": "guessed"}
    with pytest.raises(TraceError, match="provenance kind"):
        validate_trace(t)
    t = clone(small_trace)
    t.requests.prefill_union = t.requests.prefill_union[:, :, :3]
    with pytest.raises(TraceError) as e:
        validate_trace(t)
    assert e.value.field == "requests.prefill_union"


def test_pool_larger_than_pool_shape(small_trace):
    t = clone(small_trace)
    t.meta["pool_shape"]["max_nodes"] = 2
    with pytest.raises(TraceError, match="max_nodes") as e:
        validate_trace(t)
    assert e.value.field == "node_parent"


def test_error_message_is_one_line_naming_file_row_field(tmp_path, small_trace):
    t = clone(small_trace)
    t.node_q[5] = 3.0
    err = read_error(t, tmp_path)
    text = str(err)
    assert "\n" not in text
    assert text.startswith(f"{tmp_path / 'bad.parquet'}, row {err.row}, field 'node_q': ")


def test_valid_file_reads(tmp_path, small_trace):
    path = tmp_path / "ok.parquet"
    write_unchecked(small_trace, path)
    read_trace(path)
    assert pq.ParquetFile(path).metadata.num_rows == small_trace.num_positions


@settings(max_examples=30)
@given(seed=seeds, N=st.sampled_from([100, 128, 200]), kind=st.sampled_from(["range", "repeat", "swap"]),
       data=st.data())
def test_route_errors_with_qwen_like_geometry(tmp_path_factory, seed, N, kind, data):
    # k = 8 one-byte ids take the fast word checks first; errors are still located exactly.
    t = clone(random_trace(seed, N=N, k=8, L=4, pool_nodes=4, output_len=(3, 5)))
    where = data.draw(st.sampled_from(["root_routes", "node_routes"]))
    routes = getattr(t, where)
    i = data.draw(st.integers(0, len(routes) - 1))
    layer = data.draw(st.integers(0, 3))
    j = data.draw(st.integers(1, 7))
    if kind == "range":
        routes[i, layer, 7] = data.draw(st.integers(N, 255))
    elif kind == "repeat":
        routes[i, layer, j] = routes[i, layer, j - 1]
    else:
        routes[i, layer, j - 1], routes[i, layer, j] = routes[i, layer, j], routes[i, layer, j - 1]
    with pytest.raises(TraceError) as e:
        validate_trace(t)
    assert e.value.field == where
    assert e.value.row == (i if where == "root_routes" else row_of_node(t, i))
    assert f"layer {layer}" in str(e.value)


# ------------------------------------------- positions named for what they are ---

@settings(max_examples=25)
@given(seed=seeds, data=st.data())
def test_swapped_positions_are_named_out_of_order(tmp_path_factory, seed, data):
    t = clone(random_trace(seed, output_len=(6, 12)))
    start, end = t.request_positions(1)
    i = data.draw(st.integers(start, end - 2))
    j = data.draw(st.integers(i + 1, end - 1))
    t.pos_index[[i, j]] = t.pos_index[[j, i]]
    err = read_error(t, tmp_path_factory.mktemp("v"))
    assert (err.row, err.field) == (i, "pos_index")
    assert (f"positions out of order: position {j - start} at row {i} comes before position {i - start} "
            f"at row {j}") in str(err)
    assert "missing" not in str(err)


def test_duplicate_names_the_first_occurrence(tmp_path, small_trace):
    t = clone(small_trace)
    t.pos_index[4] = 1
    err = read_error(t, tmp_path)
    assert (err.row, err.field) == (4, "pos_index") and "duplicate position 1 (also at row 1)" in str(err)


def _with_pos_request(trace, path, edit):
    """A file whose pos_request column is edited after the routes were coded (as damage would)."""
    table = trace_io._to_table(trace, str(path))
    col = table.column("pos_request").to_numpy().copy()
    edit(col)
    pq.write_table(table.set_column(0, "pos_request", pa.array(col, pa.int32())), path)
    return path


@pytest.mark.parametrize("value", [2, 7, -1])
def test_request_index_beyond_the_requests_names_pos_request(tmp_path, small_trace, value):
    for row in range(small_trace.num_positions):
        path = _with_pos_request(small_trace, tmp_path / "bad.parquet",
                                 lambda c, row=row: c.__setitem__(row, value))
        with pytest.raises(TraceError) as e:
            read_trace(path)
        assert (e.value.row, e.value.field) == (row, "pos_request"), str(e.value)
        assert f"request index {value} outside [0, 2)" in str(e.value)


def test_row_moved_to_the_next_request_is_a_position_error_not_a_route_error(tmp_path, small_trace):
    last = small_trace.request_positions(0)[1] - 1
    path = _with_pos_request(small_trace, tmp_path / "bad.parquet", lambda c: c.__setitem__(last, 1))
    with pytest.raises(TraceError) as e:
        read_trace(path)
    assert e.value.field in ("pos_index", "pos_request", "requests.output_len")
    assert "root_routes" not in str(e.value)


@settings(max_examples=50, deadline=None)
@given(sizes=st.lists(st.integers(0, 4), min_size=1, max_size=12))
def test_node_index_maps_flat_ids_to_their_pool(sizes):
    from simmoe.trace.node_index import node_in_pool, row_of_node

    node_ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    flat = [(row, j) for row, n in enumerate(sizes) for j in range(n)]   # empty pools own no id
    for m, (row, j) in enumerate(flat):
        assert (row_of_node(m, node_ptr), node_in_pool(m, node_ptr)) == (row, j)
