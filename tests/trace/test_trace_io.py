"""Trace files: write → read gives identical arrays; writes are atomic; the route codec is exact."""

from __future__ import annotations

import os

import numpy as np
import pyarrow.parquet as pq
import pytest
from factories import random_routes, random_trace
from hypothesis import given, settings
from hypothesis import strategies as st
from tracefile_helpers import assert_traces_equal, clone

from simmoe.errors import TraceError
from simmoe.trace import route_codec
from simmoe.trace.io import read_trace, write_trace


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
