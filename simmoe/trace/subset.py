"""Subsets of a trace by request: the positions and pools of the requests kept.

Used by ``simmoe bound --requests``, ``simmoe report`` and the validation report.
"""

from __future__ import annotations

import numpy as np

from simmoe.errors import SimmoeError
from simmoe.trace.schema import Requests, Trace


def head_requests(trace: Trace, n: int | None) -> Trace:
    """The first ``n`` requests of ``trace`` (all when ``n`` is None or not smaller). O(rows kept)."""
    R = len(trace.requests)
    if n is None or n >= R:
        return trace
    if n < 1:
        raise SimmoeError(f"requests must be at least 1, got {n}")
    P = trace.request_positions(n - 1)[1]
    M = int(trace.node_ptr[P])
    rq = trace.requests
    return Trace(
        meta=dict(trace.meta),
        requests=Requests(request_id=rq.request_id[:n], dataset=rq.dataset[:n],
                          prompt_len=rq.prompt_len[:n], output_len=rq.output_len[:n],
                          prefill_union=rq.prefill_union[:n], prefill_time_ms=rq.prefill_time_ms[:n]),
        pos_request=trace.pos_request[:P], pos_index=trace.pos_index[:P],
        root_token=trace.root_token[:P], root_routes=trace.root_routes[:P],
        node_ptr=trace.node_ptr[:P + 1],
        node_parent=trace.node_parent[:M], node_level=trace.node_level[:M],
        node_token=trace.node_token[:M], node_q=trace.node_q[:M], node_p=trace.node_p[:M],
        node_agree=trace.node_agree[:M], node_routes=trace.node_routes[:M],
        node_target_prob=None if trace.node_target_prob is None else trace.node_target_prob[:M],
        node_target_cdf=None if trace.node_target_cdf is None else trace.node_target_cdf[:M],
        draft_time_ms=None if trace.draft_time_ms is None else trace.draft_time_ms[:P],
        path=trace.path,
    )


def select_requests(trace: Trace, index) -> Trace:
    """The requests ``index`` (increasing) of ``trace``, with their positions and pools.  O(rows kept)."""
    index = np.asarray(index, dtype=np.int64)
    R = len(trace.requests)
    if index.size == 0 or (np.diff(index) <= 0).any() or index[0] < 0 or index[-1] >= R:
        raise SimmoeError(f"request subset must be increasing indices below {R}")
    pos = np.concatenate([np.arange(*trace.request_positions(int(r))) for r in index])
    ptr = trace.node_ptr
    counts = ptr[pos + 1] - ptr[pos]
    nodes = np.concatenate([np.arange(ptr[p], ptr[p + 1]) for p in pos]) if counts.sum() else \
        np.zeros(0, np.int64)
    rq = trace.requests
    out_len = rq.output_len[index]
    meta = dict(trace.meta)
    meta["num_requests"] = int(len(index))
    meta["subset"] = [int(i) for i in (np.asarray(meta["subset"])[index] if "subset" in meta else index)]

    def opt(a, ix):
        return None if a is None else a[ix]

    return Trace(
        meta=meta,
        requests=Requests(request_id=rq.request_id[index], dataset=rq.dataset[index],
                          prompt_len=rq.prompt_len[index], output_len=out_len,
                          prefill_union=rq.prefill_union[index],
                          prefill_time_ms=rq.prefill_time_ms[index]),
        pos_request=np.repeat(np.arange(len(index), dtype=np.int32), out_len),
        pos_index=trace.pos_index[pos], root_token=trace.root_token[pos],
        root_routes=trace.root_routes[pos],
        node_ptr=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        node_parent=trace.node_parent[nodes], node_level=trace.node_level[nodes],
        node_token=trace.node_token[nodes], node_q=trace.node_q[nodes], node_p=trace.node_p[nodes],
        node_agree=trace.node_agree[nodes], node_routes=trace.node_routes[nodes],
        node_target_prob=opt(trace.node_target_prob, nodes), draft_time_ms=opt(trace.draft_time_ms, pos),
        node_target_cdf=opt(trace.node_target_cdf, nodes),
        path=trace.path,
    )
