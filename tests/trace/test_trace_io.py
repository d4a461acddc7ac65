"""Trace files: write → read gives identical arrays; writes are atomic; the route codec is exact."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from factories import random_routes, random_trace
from hypothesis import given, settings
from hypothesis import strategies as st
from tracefile_helpers import assert_traces_equal, clone

from simmoe.errors import TraceError
from simmoe.trace import route_codec
from simmoe.trace.io import array_values, numpy_dtype, read_trace, write_trace


def with_optional_columns(trace, seed=0):
    rng = np.random.default_rng(seed)
    t = clone(trace)
    t.node_target_prob = rng.random(t.num_nodes).astype(np.float32)
    t.draft_time_ms = rng.uniform(0.5, 3.0, (t.num_positions, t.pool_shape.depth)).astype(np.float32)
    t.draft_time_ms[0, -1] = np.nan  # a level that was not drafted
    t.requests.prefill_time_ms[0] = 123.25
    return t


@pytest.mark.parametrize("build", [
    lambda: random_trace(1),
    lambda: random_trace(2, pool_nodes=0),                       # AR-only: empty pools
    lambda: with_optional_columns(random_trace(3)),
    lambda: random_trace(4, N=300, k=9, L=2),                    # uint16 ids, place stored as bits
    lambda: random_trace(5, N=16, k=16, L=2),                    # every expert routed
    lambda: random_trace(6, N=128, k=8, L=4, pool_nodes=18),
    lambda: random_trace(7, num_requests=1, output_len=(1, 1)),  # a single position
], ids=["small", "ar-only", "optional", "uint16", "k=N", "qwen-like", "one-position"])
def test_round_trip_is_identical(tmp_path, build):
    trace = build()
    path = tmp_path / "t.parquet"
    write_trace(trace, path)
    back = read_trace(path)
    assert_traces_equal(trace, back)
    assert back.path == str(path)


@given(seed=st.integers(0, 10_000), L=st.integers(1, 4), N=st.integers(2, 40), data=st.data())
def test_round_trip_random_geometries(tmp_path_factory, seed, L, N, data):
    k = data.draw(st.integers(1, min(N, 12)))
    nodes = data.draw(st.sampled_from([0, 1, 5, 18]))
    trace = random_trace(seed, L=L, N=N, k=k, pool_nodes=nodes, num_requests=data.draw(st.integers(1, 3)))
    path = tmp_path_factory.mktemp("rt") / "t.parquet"
    write_trace(trace, path)
    assert_traces_equal(trace, read_trace(path))


def test_correlated_routes_round_trip_and_beat_plain(tmp_path):
    # Children that keep most of their parent's experts: the delta form is exact and smaller.
    rng = np.random.default_rng(0)
    trace = random_trace(11, L=8, N=128, k=8, pool_nodes=18, output_len=(40, 40), num_requests=2)
    routes = trace.node_routes
    node_pos = np.repeat(np.arange(trace.num_positions), np.diff(trace.node_ptr))
    for level in range(1, int(trace.node_level.max()) + 1):
        for m in np.flatnonzero(trace.node_level == level):
            par = trace.node_parent[m]
            ref = trace.root_routes[node_pos[m]] if par < 0 else routes[trace.node_ptr[node_pos[m]] + par]
            for layer in range(8):
                keep = ref[layer][rng.random(8) < 0.7]
                fresh = rng.permutation(np.setdiff1d(np.arange(128), ref[layer]))[: 8 - len(keep)]
                routes[m, layer] = np.sort(np.concatenate([keep, fresh]))
    path = tmp_path / "c.parquet"
    write_trace(trace, path)
    assert_traces_equal(trace, read_trace(path))
    plain = tmp_path / "plain.parquet"
    pq.write_table(__import__("pyarrow").table({"r": routes.reshape(len(routes), -1).tolist()}), plain,
                   compression="zstd")
    assert path.stat().st_size < plain.stat().st_size


@given(seed=st.integers(0, 10_000), k=st.integers(1, 12), has_ref=st.booleans())
def test_codec_is_exact_even_for_unsorted_cells(seed, k, has_ref):
    rng = np.random.default_rng(seed)
    N = 40
    routes = random_routes(rng, 30, 3, N, k)
    ref = random_routes(rng, 30, 3, N, k)
    routes[0, 0] = routes[0, 0][::-1]          # unsorted
    routes[1, 1, :] = routes[1, 1, 0]          # repeated
    keep, place, gaps = route_codec.encode(routes, ref if has_ref else None)
    n_keep, n_place, bad = route_codec.unpack_masks(keep.reshape(-1, keep.shape[-1]),
                                                     place.reshape(-1, place.shape[-1]), k)
    assert not bad.any()
    out = np.empty_like(routes)
    n_keep, n_place = n_keep.reshape(routes.shape), n_place.reshape(routes.shape)
    route_codec.fill_new(n_place, gaps, out)
    rows = np.arange(len(routes))
    route_codec.resolve(out, rows, ref, n_keep, n_place)
    assert np.array_equal(out, routes)


def test_write_is_atomic_and_validates_first(tmp_path, small_trace):
    path = tmp_path / "t.parquet"
    write_trace(small_trace, path)
    before = path.read_bytes()
    bad = clone(small_trace)
    bad.node_q[0] = 1.5
    with pytest.raises(TraceError):
        write_trace(bad, path)
    assert path.read_bytes() == before          # the old file is untouched
    assert os.listdir(tmp_path) == ["t.parquet"]  # no temp file left behind
    with pytest.raises(TraceError):
        write_trace(bad, tmp_path / "new.parquet")
    assert not (tmp_path / "new.parquet").exists()


def test_write_into_missing_folder_is_a_trace_error(tmp_path, small_trace):
    with pytest.raises(TraceError, match="folder"):
        write_trace(small_trace, tmp_path / "nope" / "t.parquet")


def test_meta_that_is_not_json_is_refused(tmp_path, small_trace):
    bad = clone(small_trace)
    bad.meta["hardware"] = {"when": object()}
    with pytest.raises(TraceError, match="JSON"):
        write_trace(bad, tmp_path / "t.parquet")
    assert not (tmp_path / "t.parquet").exists()


def test_read_without_validation_skips_content_checks(tmp_path, small_trace):
    from tracefile_helpers import write_unchecked

    bad = clone(small_trace)
    bad.node_q[3] = 2.0
    path = tmp_path / "bad.parquet"
    write_unchecked(bad, path)
    with pytest.raises(TraceError):
        read_trace(path)
    assert read_trace(path, validate=False).node_q[3] == 2.0


@pytest.mark.parametrize("content", [b"", b"not parquet at all"])
def test_not_a_parquet_file(tmp_path, content):
    path = tmp_path / "x.parquet"
    path.write_bytes(content)
    with pytest.raises(TraceError, match="not a parquet file") as e:
        read_trace(path)
    assert e.value.path == str(path)


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        read_trace(tmp_path / "missing.parquet")


def test_parquet_without_simmoe_metadata(tmp_path):
    import pyarrow as pa

    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), path)
    with pytest.raises(TraceError, match="not a simmoe trace"):
        read_trace(path)


@settings(max_examples=40)
@given(seed=st.integers(0, 10_000))
def test_byte_lane_compress_expand_against_python(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2**63, 64, dtype=np.uint64)
    m = rng.integers(0, 256, 64).astype(np.uint8)
    packed = route_codec.compress_lanes(x, m)
    xb, pb = x.view(np.uint8).reshape(-1, 8), packed.view(np.uint8).reshape(-1, 8)
    for i in range(64):
        lanes = [j for j in range(8) if m[i] >> j & 1]
        assert pb[i].tolist() == [int(xb[i, j]) for j in lanes] + [0] * (8 - len(lanes))
    assert np.array_equal(route_codec.expand_lanes(packed.copy(), m), x & route_codec._LANE_MASK[m])


@settings(max_examples=25)
@given(seed=st.integers(0, 10_000), keep_prob=st.sampled_from([0.0, 0.5, 0.9, 1.0]))
def test_word_path_equals_generic_path(seed, keep_prob):
    # k = 8 one-byte ids decode through uint64 words; the boolean path must agree.
    rng = np.random.default_rng(seed)
    ref = random_routes(rng, 300, 3, 128, 8)
    routes = random_routes(rng, 300, 3, 128, 8)
    keep = rng.random(ref.shape) < keep_prob
    for i, layer in zip(*np.nonzero(keep.any(axis=2))):  # child keeps part of the reference
        kept = ref[i, layer][keep[i, layer]]
        fresh = rng.permutation(np.setdiff1d(np.arange(128), ref[i, layer]))[: 8 - len(kept)]
        routes[i, layer] = np.sort(np.concatenate([kept, fresh]))
    keep_b, place_b, gaps = route_codec.encode(routes, ref)
    pm, bad = route_codec.place_lanes(keep_b.reshape(-1), place_b.reshape(-1))
    assert not bad.any()
    words = route_codec.new_words(pm, gaps).reshape(300, 3)
    rows = np.arange(300)
    route_codec.resolve_words(words, rows, lambda r: ref.view(np.uint64).reshape(300, 3)[r],
                              keep_b.reshape(300, 3), pm.reshape(300, 3))
    assert np.array_equal(words.view(np.uint8).reshape(300, 3, 8), routes)


@settings(max_examples=25)
@given(seed=st.integers(0, 10_000), share=st.floats(0, 1))
def test_word_encoder_equals_generic_encoder(seed, share):
    rng = np.random.default_rng(seed)
    ref = random_routes(rng, 200, 3, 128, 8)
    routes = random_routes(rng, 200, 3, 128, 8)
    same = rng.random(200) < share
    routes[same] = ref[same]
    routes[0, 1, 4] = routes[0, 1, 3]          # an invalid cell is stored whole by both
    has_ref = rng.random(200) < 0.9
    fast = route_codec._encode_words(routes, ref, has_ref)
    original = route_codec.word_path
    try:
        route_codec.word_path = lambda k, dtype: False
        generic = route_codec.encode(routes, ref, has_ref)
    finally:
        route_codec.word_path = original
    for a, b in zip(fast, generic):
        assert np.array_equal(a, b)


# -- damaged and odd files: one clear TraceError naming the field ------------------

def _edited(path, trace, edit_table=None, header_edit=None):
    """Write ``trace`` to ``path`` with its arrow table and/or its JSON header edited."""
    import json

    from simmoe.trace import io as trace_io

    table = trace_io._to_table(trace, str(path))
    if edit_table is not None:
        table = edit_table(table)
    if header_edit is not None:
        header = json.loads(table.schema.metadata[trace_io.METADATA_KEY])
        header_edit(header)
        table = table.replace_schema_metadata({trace_io.METADATA_KEY: json.dumps(header).encode()})
    pq.write_table(table, path)
    return path


def test_checksum_catches_damage_that_still_decodes(tmp_path, small_trace):
    import pyarrow as pa

    def bump_token(table):
        tokens = table.column("root_token").to_numpy().copy()
        tokens[2] += 1                                   # still a valid token id
        return table.set_column(table.column_names.index("root_token"), "root_token", pa.array(tokens))

    path = _edited(tmp_path / "t.parquet", small_trace, edit_table=bump_token)
    with pytest.raises(TraceError, match="damaged.*checksum") as e:
        read_trace(path)
    assert e.value.field == "content_sha256"
    # a file written before the checksum existed reads without one
    legacy = _edited(tmp_path / "old.parquet", small_trace, header_edit=lambda h: h.pop("content_sha256"))
    assert_traces_equal(small_trace, read_trace(legacy))


def test_checksum_covers_the_metadata(tmp_path, small_trace):
    path = _edited(tmp_path / "t.parquet", small_trace,
                   header_edit=lambda h: h["meta"]["provenance"].update(seed=99))
    with pytest.raises(TraceError, match="checksum"):
        read_trace(path)
    path = _edited(tmp_path / "u.parquet", small_trace, header_edit=lambda h: h.update(extra=1))
    with pytest.raises(TraceError, match="unknown metadata key 'extra'"):
        read_trace(path)


def test_a_folder_is_not_a_trace(tmp_path):
    with pytest.raises(TraceError, match="is a folder") as e:
        read_trace(tmp_path)
    assert "no such file" not in str(e.value)


def _without_requests(trace):
    from simmoe.trace.schema import Requests

    t = clone(trace)
    L, N = t.geometry.num_layers, t.geometry.num_experts
    t.requests = Requests(request_id=np.array([], dtype=object), dataset=np.array([], dtype=object),
                          prompt_len=np.zeros(0, np.int32), output_len=np.zeros(0, np.int32),
                          prefill_union=np.zeros((0, L, N), bool), prefill_time_ms=np.zeros(0))
    for name in ("pos_request", "pos_index", "root_token", "root_routes", "node_parent", "node_level",
                 "node_token", "node_q", "node_p", "node_agree", "node_routes"):
        setattr(t, name, getattr(t, name)[:0])
    t.node_ptr = np.zeros(1, np.int64)
    return t


def test_a_trace_without_requests_is_refused(tmp_path, small_trace, capsys):
    from tracefile_helpers import write_unchecked

    from simmoe.cli import main

    empty = _without_requests(small_trace)
    with pytest.raises(TraceError, match="no requests"):
        write_trace(empty, tmp_path / "t.parquet")
    assert not (tmp_path / "t.parquet").exists()
    path = tmp_path / "empty.parquet"
    write_unchecked(empty, path)
    with pytest.raises(TraceError, match="no requests") as e:
        read_trace(path)
    assert e.value.field == "requests.request_id"
    for argv in (["inspect", str(path)], ["replay", str(path), "--no-progress"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no requests" in err and "reshape" not in err


@pytest.mark.parametrize("edit, match", [
    (lambda u: u.update(zstd_base64="QUJDREVGR0g="), "cannot be decoded"),       # not zstd
    (lambda u: u.update(zstd_base64="not base64!"), "cannot be decoded"),
    (lambda u: u.update(raw_bytes=u["raw_bytes"] * 1000), "raw_bytes"),
    (lambda u: u.update(raw_bytes="6"), "must be an integer"),
])
def test_damaged_prefill_union_blob(tmp_path, small_trace, edit, match):
    path = _edited(tmp_path / "t.parquet", small_trace,
                   header_edit=lambda h: edit(h["requests"]["prefill_union"]))
    with pytest.raises(TraceError, match=match) as e:
        read_trace(path)
    assert e.value.field == "requests.prefill_union" and "\n" not in str(e.value)


@pytest.mark.parametrize("key, value", [("num_layers", "3"), ("num_layers", 3.7), ("num_layers", 3.0),
                                        ("top_k", True), ("num_experts", None)])
def test_geometry_integers_must_be_integers(tmp_path, small_trace, key, value):
    path = _edited(tmp_path / "t.parquet", small_trace,
                   header_edit=lambda h: h["meta"]["geometry"].update({key: value}))
    with pytest.raises(TraceError, match=f"'{key}' must be an integer, got {value!r}") as e:
        read_trace(path)
    assert e.value.field == "meta.geometry"
    bad = clone(small_trace)
    bad.meta["geometry"] = dict(bad.meta["geometry"], **{key: value})
    from simmoe.trace.validate import validate_trace

    with pytest.raises(TraceError, match="must be an integer"):
        validate_trace(bad)


@pytest.mark.parametrize("key, value", [("prompt_len", ["5", 6]), ("output_len", [7.5, 7])])
def test_request_lengths_must_be_integers(tmp_path, small_trace, key, value):
    path = _edited(tmp_path / "t.parquet", small_trace,
                   header_edit=lambda h: h["requests"].update({key: value}))
    with pytest.raises(TraceError, match="must be an integer") as e:
        read_trace(path)
    assert e.value.field == f"requests.{key}"


# -- atomic writes ------------------------------------------------------------------

def test_atomic_write_onto_a_folder_is_one_clear_error(tmp_path):
    from simmoe.atomicio import write_text_atomic
    from simmoe.errors import SimmoeError

    (tmp_path / "out.json").mkdir()
    with pytest.raises(SimmoeError, match="is a folder"):
        write_text_atomic(tmp_path / "out.json", "{}")
    with pytest.raises(SimmoeError, match="does not exist"):
        write_text_atomic(tmp_path / "no" / "out.json", "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]   # no temp file left


def test_atomic_write_removes_stale_temps_of_dead_writers_only(tmp_path):
    import subprocess
    import sys

    from simmoe.atomicio import write_text_atomic

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = tmp_path / f".t.json.{dead}.abc123_x.tmp"
    alive = tmp_path / f".t.json.{os.getppid()}.def456_y.tmp"      # a running process: a concurrent writer
    other = tmp_path / f".u.json.{dead}.ghi789_z.tmp"               # another output's temp
    for p in (stale, alive, other):
        p.write_text("partial")
    write_text_atomic(tmp_path / "t.json", "{}")
    assert not stale.exists() and alive.exists() and other.exists()
    assert (tmp_path / "t.json").read_text() == "{}"


@pytest.mark.parametrize("arrow_type, numpy_type", [
    (pa.bool_(), np.bool_), (pa.int8(), np.int8), (pa.int16(), np.int16), (pa.int32(), np.int32),
    (pa.int64(), np.int64), (pa.uint8(), np.uint8), (pa.float32(), np.float32), (pa.float64(), np.float64)])
def test_array_values_equal_arrows_own_conversion(arrow_type, numpy_type):
    # read_trace reads columns from their buffers (arrow's to_numpy imports pandas): same values, same dtype,
    # for slices at every bit offset of a bool array
    rng = np.random.default_rng(7)
    values = (rng.random(37) < 0.5) if numpy_type is np.bool_ else (rng.random(37) * 100).astype(numpy_type)
    arr = pa.array(values, type=arrow_type)
    for lo in range(0, 12):
        for length in (0, 1, 5, 37 - lo):
            part = arr.slice(lo, length)
            got = array_values(part)
            assert got.dtype == numpy_dtype(arrow_type) == np.dtype(arrow_type.to_pandas_dtype())
            assert np.array_equal(got, part.to_numpy(zero_copy_only=False))
