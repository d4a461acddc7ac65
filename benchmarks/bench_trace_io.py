"""Benchmark of the trace file: bytes per position on disk and load time.

Builds a realistic trace in the SpecFit setting (Qwen3-30B-A3B geometry:
48 layers, 128 experts, top-8; pools of 18 nodes from top-2 expansion,
depth 5; 80 requests of ~222 positions, like the GSM8K workload) with
correlated routes — per-layer expert popularity (Zipf), consecutive roots
keeping part of their experts, children keeping most of their parent's —
writes it, and reads it back several times.  The route model is this
script's own (independent of ``simmoe synth``), tuned so that an 8-token
tree touches about 29 experts per layer, as the SpecFit GSM8K rows imply.

Reports (synthetic input): bytes per position of the file and of plain
sorted uint8 routes under zstd (the baseline), and the median of the load
times (``read_trace`` with and without validation).

    python benchmarks/bench_trace_io.py [--requests 80] [--repeat 5] [--keep FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from simmoe.trace.io import ZSTD_LEVEL, read_trace, write_trace
from simmoe.trace.schema import SCHEMA_VERSION, ModelGeometry, PoolShape, Requests, Trace

L, N, K_TOP = 48, 128, 8
ZIPF = 0.9          # per-layer popularity exponent
ROOT_KEEP = 0.40    # chance a root keeps each expert of the previous root
CHILD_KEEP = 0.55   # chance a node keeps each expert of its parent
POOL_NODES, DEPTH, EXPAND = 18, 5, 2


def _tree_shapes(rng: np.random.Generator, count: int):
    """Random pool shapes: top-2 expansion, depth <= 5, 18 nodes, parents first (level order)."""
    shapes = []
    for _ in range(count):
        parents, levels, frontier = [], [], [-1]
        while len(parents) < POOL_NODES and frontier:
            nxt = []
            for v in frontier:
                lev = 0 if v < 0 else levels[v]
                if lev >= DEPTH:
                    continue
                for _ in range(EXPAND if rng.random() < 0.7 or v < 0 else 1):
                    if len(parents) < POOL_NODES:
                        parents.append(v)
                        levels.append(lev + 1)
                        nxt.append(len(parents) - 1)
            frontier = nxt
        shapes.append((np.array(parents, np.int16), np.array(levels, np.int8)))
    return shapes


def _orderings(rng, logw: np.ndarray, count: int = 1024, depth: int = 3 * K_TOP) -> np.ndarray:
    """Per layer, ``count`` popularity-weighted draws without replacement (Gumbel top-``depth``): [L, count, depth]."""
    keys = logw[:, None, :] + rng.gumbel(size=(L, count, N)).astype(np.float32)
    top = np.argpartition(-keys, depth, axis=-1)[..., :depth]
    return np.take_along_axis(top, np.argsort(-np.take_along_axis(keys, top, -1), axis=-1), -1).astype(np.uint8)


def _step_routes(rng, ref: np.ndarray, keep_prob: float, orderings: np.ndarray) -> np.ndarray:
    """New routes [n, L, k]: keep each reference expert with ``keep_prob``, draw the rest by popularity.

    The new experts are the first ones of a random pre-drawn popularity ordering
    that the reference does not route to (3k candidates always leave enough).
    """
    n = len(ref)
    out = np.empty((n, L, K_TOP), np.uint8)
    count = orderings.shape[1]
    for s in range(0, n, 4096):
        r = ref[s:s + 4096]
        c = len(r)
        cand = orderings[np.arange(L)[None, :], rng.integers(0, count, (c, L))]       # [c, L, 3k]
        fresh = ~(cand[..., :, None] == r[..., None, :]).any(-1)
        keep = rng.random((c, L, K_TOP)) < keep_prob
        need = K_TOP - keep.sum(-1, keepdims=True)
        take = fresh & (np.cumsum(fresh, axis=-1) <= need)
        merged = np.concatenate([np.where(keep, r, 255), np.where(take, cand, 255)], axis=-1)
        out[s:s + c] = np.sort(merged, axis=-1)[..., :K_TOP]
    return out


def build_trace(num_requests: int, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    ranks = np.argsort(rng.random((L, N)), axis=1)
    logw = (-ZIPF * np.log1p(ranks)).astype(np.float32)
    lens = np.clip(rng.normal(222, 60, num_requests), 60, 480).astype(np.int32)
    P = int(lens.sum())
    pos_request = np.repeat(np.arange(num_requests, dtype=np.int32), lens)
    pos_index = np.concatenate([np.arange(n, dtype=np.int32) for n in lens])
    # Roots: a chain per request, all requests advanced together.
    orderings = _orderings(rng, logw)
    root = np.empty((P, L, K_TOP), np.uint8)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    root[starts] = _step_routes(rng, np.full((num_requests, L, K_TOP), 255, np.uint8), 0.0, orderings)
    for t in range(1, int(lens.max())):
        live = starts[lens > t] + t
        root[live] = _step_routes(rng, root[live - 1], ROOT_KEEP, orderings)
    # Pools: one of 64 random shapes per position, decoded level by level.
    shapes = _tree_shapes(rng, 64)
    pick = rng.integers(0, len(shapes), P)
    parent = np.concatenate([shapes[s][0] for s in pick])
    level = np.concatenate([shapes[s][1] for s in pick])
    ptr = np.concatenate([[0], np.cumsum([len(shapes[s][0]) for s in pick])]).astype(np.int64)
    M = int(ptr[-1])
    node_pos = np.repeat(np.arange(P), np.diff(ptr))
    gparent = ptr[node_pos] + parent
    routes = np.empty((M, L, K_TOP), np.uint8)
    for d in range(1, DEPTH + 1):
        rows = np.flatnonzero(level == d)
        ref = root[node_pos[rows]] if d == 1 else routes[gparent[rows]]
        routes[rows] = _step_routes(rng, ref, CHILD_KEEP, orderings)
    q = rng.beta(2.0, 1.2, M).astype(np.float32)
    p = np.empty(M, np.float32)
    for d in range(1, DEPTH + 1):
        rows = np.flatnonzero(level == d)
        p[rows] = q[rows] * (1.0 if d == 1 else p[gparent[rows]])
    geometry = ModelGeometry(L, N, K_TOP, expert_bytes=9_437_184, name="Qwen3-30B-A3B (benchmark routes)")
    meta = {"schema_version": SCHEMA_VERSION,
            "provenance": {"kind": "synthetic", "generator": "benchmarks/bench_trace_io.py", "seed": seed},
            "geometry": geometry.to_dict(),
            "pool_shape": PoolShape(EXPAND, DEPTH, POOL_NODES, 7).to_dict(), "hardware": None}
    requests = Requests(
        request_id=np.array([f"gsm8k-{i}" for i in range(num_requests)], dtype=object),
        dataset=np.array(["gsm8k"] * num_requests, dtype=object),
        prompt_len=rng.integers(80, 300, num_requests).astype(np.int32), output_len=lens,
        prefill_union=rng.random((num_requests, L, N)) < 0.8,
        prefill_time_ms=rng.uniform(200, 900, num_requests))
    return Trace(meta=meta, requests=requests, pos_request=pos_request, pos_index=pos_index,
                 root_token=rng.integers(0, 151_000, P).astype(np.int32), root_routes=root, node_ptr=ptr,
                 node_parent=parent, node_level=level, node_token=rng.integers(0, 151_000, M).astype(np.int32),
                 node_q=q, node_p=p, node_agree=rng.random(M) < q, node_routes=routes)


def tree_union(trace: Trace, size: int = 8) -> float:
    """Mean experts per layer touched by the root and the first size-1 nodes (level order)."""
    total, count = 0.0, 0
    for i in range(0, trace.num_positions, 97):
        s = trace.pool_slice(i)
        rows = np.concatenate([trace.root_routes[i][None], trace.node_routes[s][: size - 1]])
        total += np.mean([len(np.unique(rows[:, layer])) for layer in range(L)])
        count += 1
    return total / count


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=80)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", help="also keep the generated trace at this path")
    ap.add_argument("--reuse", action="store_true", help="read the trace at --keep instead of generating one")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.keep) if args.keep else Path(tmp) / "bench.parquet"
        trace = None
        if not (args.reuse and args.keep):
            t0 = time.perf_counter()
            trace = build_trace(args.requests)
            print(f"synthetic benchmark trace: {len(trace.requests)} requests, {trace.num_positions} positions, "
                  f"{trace.num_nodes} nodes ({time.perf_counter() - t0:.1f} s to generate)")
            print(f"  experts per layer in an 8-token tree: {tree_union(trace):.1f} "
                  f"(independent routing: {N * (1 - (1 - K_TOP / N) ** 8):.1f})")
            t0 = time.perf_counter()
            write_trace(trace, path)
            print(f"written in {time.perf_counter() - t0:.1f} s")
        back = read_trace(path)
        P = back.num_positions
        codec = pa.Codec("zstd", ZSTD_LEVEL)
        baseline = sum(len(codec.compress(a.tobytes(), asbytes=True)) for a in (back.root_routes, back.node_routes))
        print(f"file: {path.stat().st_size / 1e6:.1f} MB for {P} positions, {path.stat().st_size / P:.0f} B/position")
        print(f"baseline, plain sorted uint8 routes under zstd level {ZSTD_LEVEL}: {baseline / P:.0f} B/position "
              f"(routes only)")
        for validate in (True, False):
            wall, cpu = [], []
            for _ in range(args.repeat):
                t0, c0 = time.perf_counter(), time.process_time()
                back = read_trace(path, validate=validate)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            print(f"read_trace(validate={validate}): wall median {statistics.median(wall):.2f} s "
                  f"(min {min(wall):.2f}, max {max(wall):.2f}); CPU median {statistics.median(cpu):.2f} s; "
                  f"n={len(wall)}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        if trace is not None:
            assert np.array_equal(back.node_routes, trace.node_routes)
            assert np.array_equal(back.root_routes, trace.root_routes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
