"""Importing dense routing arrays: round trips from every container, phases, -1 cells, errors."""

from __future__ import annotations

import json
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmoe.errors import SimmoeError, TraceError
from simmoe.trace.importer import RouteColumns, import_routes
from simmoe.trace.importer_common import MAX_UNION_BYTES

CONTAINERS = ("npz", "safetensors", "parquet", "jsonl")


def random_routes(rng, T, L, k, N, dtype=np.int16):
    """[T, L, k] distinct experts per cell, in random order."""
    keys = rng.random((T * L, N))
    return np.argsort(keys, axis=1)[:, :k].reshape(T, L, k).astype(dtype)


def write_arrays(path, fmt, arrays):
    """Write named per-token arrays in one of the dense containers."""
    if fmt == "npz":
        np.savez(path, **arrays)
    elif fmt == "safetensors":
        from safetensors.numpy import save_file

        save_file({name: np.ascontiguousarray(a) for name, a in arrays.items()}, str(path))
    elif fmt == "parquet":
        pq.write_table(pa.table({name: a.tolist() for name, a in arrays.items()}), path)
    elif fmt == "jsonl":
        names = list(arrays)
        rows = zip(*(arrays[n].tolist() for n in names), strict=True)
        path.write_text(
            "".join(json.dumps(dict(zip(names, row, strict=True))) + "\n" for row in rows)
        )
    return path


@st.composite
def dense_inputs(draw):
    """A dense routing input and what the trace must hold."""
    seed = draw(st.integers(0, 2**32 - 1))
    fmt = draw(st.sampled_from(CONTAINERS))
    L, k = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    N = draw(st.sampled_from([k, 8, 300]))  # k = N (every expert), one byte, two bytes
    R = draw(st.integers(1, 4))
    with_idx = draw(st.booleans())
    phase_kind = draw(st.sampled_from(["none", "bool", "int", "word"]))
    ids_kind = "int" if fmt == "safetensors" else draw(st.sampled_from(["int", "str"]))
    if fmt == "safetensors" and phase_kind == "word":
        phase_kind = "int"
    rng = np.random.default_rng(seed)
    n_prompt = rng.integers(0, 3, R) if phase_kind != "none" else np.zeros(R, int)
    n_out = rng.integers(1, 5, R)
    req, prompt, idx = [], [], []
    for r in range(R):
        req += [r] * (n_prompt[r] + n_out[r])
        prompt += [True] * n_prompt[r] + [False] * n_out[r]
        start = int(rng.integers(0, 5))
        idx += list(range(start, start + n_prompt[r] + n_out[r]))
    req, prompt, idx = np.array(req), np.array(prompt), np.array(idx)
    T = len(req)
    routes = random_routes(rng, T, L, k, N)
    # vLLM's -1: whole prompt cells without routes.
    hole = np.zeros((T, L), bool)
    if prompt.any():
        hole = prompt[:, None] & (rng.random((T, L)) < 0.3)
        routes[hole] = -1
    # Row order: shuffled when token indices say where each token goes; otherwise
    # interleaved across requests but in order within each.
    perm = rng.permutation(T) if with_idx else _interleave(rng, req)
    arrays = {"experts": routes[perm]}
    names = np.array([f"q{r}" for r in range(R)])
    arrays["request_id"] = (req[perm] * 7 + 3) if ids_kind == "int" else names[req[perm]]
    if with_idx:
        arrays["token_idx"] = idx[perm]
    if phase_kind == "bool":
        arrays["phase"] = prompt[perm]
    elif phase_kind == "int":
        arrays["phase"] = prompt[perm].astype(np.uint8)
    elif phase_kind == "word":
        words = np.array(["Output", "prompt ", "decode", "PREFILL"])
        arrays["phase"] = words[prompt[perm] * 1 + 2 * rng.integers(0, 2, T)]
    truth = {
        "routes": routes,
        "req": req,
        "prompt": prompt,
        "hole": hole,
        "N": N,
        "L": L,
        "k": k,
        "n_prompt": n_prompt,
        "seen": list(dict.fromkeys(req[perm].tolist())),
    }
    return fmt, arrays, phase_kind != "none", truth


def _interleave(rng, req):
    """A row order that keeps each request's rows in order but mixes requests."""
    queues = {r: list(np.flatnonzero(req == r)) for r in np.unique(req)}
    out = []
    while queues:
        r = int(rng.choice(list(queues)))
        out.append(queues[r].pop(0))
        if not queues[r]:
            del queues[r]
    return np.array(out)


@settings(max_examples=40)
@given(case=dense_inputs(), give_n=st.booleans())
def test_dense_round_trip(tmp_path_factory, case, give_n):
    fmt, arrays, with_phase, truth = case
    path = write_arrays(tmp_path_factory.mktemp("d") / f"routes.{fmt}", fmt, arrays)
    cols = RouteColumns(prefill="phase" if with_phase else None)
    trace, report = import_routes(path, columns=cols, num_experts=truth["N"] if give_n else None)

    L, k = truth["L"], truth["k"]
    g = trace.geometry
    assert (g.num_layers, g.top_k) == (L, k)
    assert g.num_experts == truth["N"] if give_n else g.num_experts <= truth["N"]
    assert report.layout == "dense" and report.records == len(truth["req"])
    assert trace.num_nodes == 0 and trace.meta["provenance"]["layout"] == "dense"
    assert report.prefill_missing_cells == int(truth["hole"].sum())
    assert len(trace.requests) == len(truth["seen"])
    for t, r in enumerate(truth["seen"]):  # trace order: first appearance in the file
        a, b = trace.request_positions(t)
        rows = np.flatnonzero((truth["req"] == r) & ~truth["prompt"])
        assert np.array_equal(trace.root_routes[a:b], np.sort(truth["routes"][rows], axis=2))
        assert trace.pos_index[a:b].tolist() == list(range(len(rows)))
        assert trace.requests.prompt_len[t] == truth["n_prompt"][r]
        union = np.zeros((L, truth["N"]), bool)
        for row in np.flatnonzero((truth["req"] == r) & truth["prompt"]):
            for layer in range(L):
                if not truth["hole"][row, layer]:
                    union[layer, truth["routes"][row, layer]] = True
        assert np.array_equal(trace.requests.prefill_union[t], union[:, : g.num_experts])


def test_npy_is_one_request_of_output_tokens(tmp_path):
    rng = np.random.default_rng(1)
    routes = random_routes(rng, 6, 3, 2, 16, dtype=np.uint8)
    np.save(tmp_path / "req42.npy", routes)
    trace, report = import_routes(tmp_path / "req42.npy", num_experts=16)
    assert list(trace.requests.request_id) == ["req42"]
    assert np.array_equal(trace.root_routes, np.sort(routes, axis=2))
    assert trace.requests.prompt_len.tolist() == [0] and report.inferred == []


def test_dense_and_long_format_agree(tmp_path):
    """The same routes as records and as arrays give the same trace."""
    rng = np.random.default_rng(2)
    routes = random_routes(rng, 9, 3, 2, 12)
    req = np.array(["a"] * 4 + ["b"] * 5)
    tok = np.array([0, 1, 2, 3, 5, 6, 7, 8, 9])
    prompt = np.array([1, 1, 0, 0, 1, 0, 0, 0, 0], bool)
    np.savez(tmp_path / "d.npz", experts=routes, request_id=req, token_idx=tok, phase=prompt)
    records = [
        {
            "request_id": str(req[t]),
            "token_idx": int(tok[t]),
            "layer": layer,
            "experts": routes[t, layer].tolist(),
            "phase": "prompt" if prompt[t] else "output",
        }
        for t in range(9)
        for layer in rng.permutation(3).tolist()
    ]
    (tmp_path / "l.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    cols = RouteColumns(prefill="phase")
    dense, _ = import_routes(tmp_path / "d.npz", columns=cols, num_experts=12)
    long, _ = import_routes(tmp_path / "l.jsonl", columns=cols, num_experts=12)
    for name in ("pos_request", "pos_index", "root_routes", "root_token"):
        assert np.array_equal(getattr(dense, name), getattr(long, name)), name
    for name in ("request_id", "prompt_len", "output_len", "prefill_union"):
        assert np.array_equal(getattr(dense.requests, name), getattr(long.requests, name)), name


def test_output_cells_of_minus_one_are_gaps(tmp_path):
    rng = np.random.default_rng(3)
    routes = random_routes(rng, 5, 4, 2, 8)
    routes[2, 1] = -1
    np.savez(tmp_path / "d.npz", experts=routes)
    with pytest.raises(
        SimmoeError,
        match=r"1 \(token, layer\) cells have no routes.*token 2, layer 1, "
        r"input row 2",
    ):
        import_routes(tmp_path / "d.npz")
    trace, report = import_routes(tmp_path / "d.npz", on_gap="drop")
    assert report.dropped_tokens == 1 and trace.num_positions == 4
    assert np.array_equal(trace.root_routes, np.sort(routes[[0, 1, 3, 4]], axis=2))


def test_token_index_gaps_and_order(tmp_path):
    rng = np.random.default_rng(4)
    routes = random_routes(rng, 4, 2, 2, 8)
    np.savez(tmp_path / "d.npz", experts=routes, token_idx=np.array([7, 3, 4, 6]))
    with pytest.raises(SimmoeError, match=r"2 \(token, layer\) cells.*token 5, layer 0"):
        import_routes(tmp_path / "d.npz")
    trace, _ = import_routes(tmp_path / "d.npz", on_gap="drop")
    assert np.array_equal(trace.root_routes, np.sort(routes[[1, 2, 3, 0]], axis=2))


def test_token_ids_are_kept(tmp_path):
    rng = np.random.default_rng(5)
    routes = random_routes(rng, 4, 2, 2, 8)
    np.savez(
        tmp_path / "d.npz",
        experts=routes,
        tid=np.array([10, 11, 12, 13]),
        phase=np.array(["prompt", "output", "output", "output"]),
    )
    trace, _ = import_routes(
        tmp_path / "d.npz", columns=RouteColumns(token_id="tid", prefill="phase")
    )
    assert trace.root_token.tolist() == [11, 12, 13]
    assert trace.meta["provenance"]["columns"] == {
        "experts": "experts",
        "token_id": "tid",
        "prefill": "phase",
    }


def _bf16_safetensors(path):
    header = json.dumps({"experts": {"dtype": "BF16", "shape": [2, 1, 1], "data_offsets": [0, 4]}})
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode() + b"\0" * 4)


R3 = random_routes(np.random.default_rng(6), 4, 3, 2, 8)
ROW_BEYOND_6 = int(np.argwhere((R3 >= 6).any(axis=2))[0][0])


@pytest.mark.parametrize(
    "name,make,kwargs,field,row,match",
    [
        (
            "r.npy",
            lambda p: np.save(p, R3[:, :, 0]),
            {},
            None,
            None,
            r"routes of shape \(4, 3\): expected 3 dimensions \[tokens, MoE layers, top-k\]",
        ),
        (
            "r.npz",
            lambda p: np.savez(p, experts=R3[None]),
            {},
            "experts",
            None,
            "expected 3 dimensions",
        ),
        (
            "r.npy",
            lambda p: np.save(p, R3.astype(np.float32)),
            {},
            None,
            None,
            "routes of dtype float32: expected integer expert ids",
        ),
        ("r.npy", lambda p: np.save(p, R3 > 3), {}, None, None, "routes of dtype bool"),
        ("r.safetensors", _bf16_safetensors, {}, "experts", None, "routes of dtype BF16"),
        (
            "r.npy",
            lambda p: np.save(p, R3),
            {"num_experts": 6},
            None,
            ROW_BEYOND_6,
            r"layer \d: expert id [67] outside \[0, 6\) \(the model's N\)",
        ),
        (
            "r.npy",
            lambda p: np.save(p, R3),
            {"num_layers": 4},
            None,
            None,
            "routes have 3 MoE layers, --num-layers says 4",
        ),
        (
            "r.npy",
            lambda p: np.save(p, R3),
            {"top_k": 3},
            None,
            None,
            "routes have top-2, --top-k says 3",
        ),
        (
            "r.npy",
            lambda p: np.save(p, np.where(np.arange(2) == 0, -1, R3)),
            {},
            None,
            0,
            r"layer 0: \[-1, \d\] mixes -1 \(no routes\) with expert ids",
        ),
        (
            "r.npy",
            lambda p: np.save(p, np.where(np.arange(2) == 0, -3, R3)),
            {},
            None,
            0,
            "has negative expert id -3",
        ),
        (
            "r.npy",
            lambda p: np.save(p, np.concatenate([R3, R3[:, :, :1]], axis=2)),
            {},
            None,
            0,
            r"layer 0: expert \d listed twice",
        ),
        (
            "r.npy",
            lambda p: np.save(p, -np.ones((2, 2, 2), np.int8)),
            {},
            None,
            None,
            "no routes: every .* cell is -1",
        ),
        ("r.npy", lambda p: np.save(p, np.zeros((0, 3, 2), np.int16)), {}, None, None, "no tokens"),
        (
            "r.npz",
            lambda p: np.savez(p, experts=np.zeros((1, 1025, 1), np.int16)),
            {},
            "experts",
            None,
            "routes of 1025 layers is beyond the limit of 1024 layers",
        ),
        (
            "r.npy",
            lambda p: np.save(p, np.full((1, 1, 1), 70000, np.int32)),
            {},
            None,
            None,
            "70001 experts: at most 65536",
        ),
        (
            "r.npz",
            lambda p: np.savez(p, experts=R3, request_id=np.arange(5)),
            {},
            "request_id",
            None,
            "5 entries, but the routes have 4 tokens",
        ),
        (
            "r.npz",
            lambda p: np.savez(p, experts=R3, request_id=np.zeros((4, 1))),
            {},
            "request_id",
            None,
            "expected one entry per token",
        ),
        (
            "r.npz",
            lambda p: np.savez(p, experts=R3, token_idx=np.array([0, 1, 1, 2])),
            {},
            "token_idx",
            2,
            r"second row for request 'r', token 1 \(first at row 1\)",
        ),
        (
            "r.npz",
            lambda p: np.savez(p, experts=R3, phase=np.array(["prompt", "x", "output", "output"])),
            {"columns": RouteColumns(prefill="phase")},
            "phase",
            1,
            "phase 'x' is none of",
        ),
        (
            "r.npz",
            lambda p: np.savez(p, experts=R3, phase=np.array([0, 2, 1, 0])),
            {"columns": RouteColumns(prefill="phase")},
            "phase",
            1,
            "phase 2 is not 0",
        ),
        (
            "r.npz",
            lambda p: np.savez(p, a=R3, b=R3),
            {},
            "experts",
            None,
            r"no routes array 'experts' \(arrays are: a, b; choose one with --experts-col\)",
        ),
        (
            "r.npz",
            lambda p: np.savez(p, experts=R3),
            {"columns": RouteColumns(request="rid")},
            "rid",
            None,
            "no such array",
        ),
        (
            "r.npy",
            lambda p: np.save(p, R3),
            {"columns": RouteColumns(prefill="phase")},
            "phase",
            None,
            "a .npy file holds only the routes",
        ),
        (
            "r.npz",
            lambda p: p.write_bytes(b"PK\x03\x04 not really a zip"),
            {},
            None,
            None,
            "cannot read as npz",
        ),
        (
            "r.npy",
            lambda p: np.save(p, np.array([{"a": 1}], dtype=object)),
            {},
            None,
            None,
            "cannot read as npy",
        ),
        (
            "r.parquet",
            lambda p: pq.write_table(pa.table({"experts": [[[1, 2]] * 3, [[1, 2]] * 2]}), p),
            {},
            "experts",
            1,
            "2 layers, but row 0 has 3",
        ),
        (
            "r.parquet",
            lambda p: pq.write_table(pa.table({"experts": [[[1, 2], [3, 4]], [[1, 2], [3]]]}), p),
            {},
            "experts",
            1,
            "layer 1: 1 experts, but row 0 lists 2",
        ),
        (
            "r.parquet",
            lambda p: pq.write_table(pa.table({"experts": [[[1, 2]], [[1, None]]]}), p),
            {},
            "experts",
            1,
            "layer 0: missing expert id",
        ),
    ],
)
def test_bad_arrays_name_file_and_problem(tmp_path, name, make, kwargs, field, row, match):
    path = tmp_path / name
    make(path)
    with pytest.raises(TraceError, match=match) as e:
        import_routes(path, **kwargs)
    assert e.value.path == str(path) and str(path) in str(e.value)
    assert (e.value.field, e.value.row) == (field, row)


def test_prefill_union_is_bounded_before_allocation(tmp_path):
    # 129 requests x 1024 layers x 65536 experts of bool would be 8.1 GiB.
    T, L = 129, 1024
    routes = np.zeros((T, L, 1), np.int32)
    routes[0, 0, 0] = 65535
    np.savez(tmp_path / "d.npz", experts=routes, request_id=np.arange(T))
    assert T * L * 65536 > MAX_UNION_BYTES
    with pytest.raises(
        SimmoeError,
        match=r"prefill union of 129 requests x 1024 layers x 65536 experts "
        r"would take 8.\d GiB",
    ):
        import_routes(tmp_path / "d.npz")
