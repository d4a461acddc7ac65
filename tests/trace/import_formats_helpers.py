"""Writers of the routing-log layouts simmoe import-routes reads, from known routes, and a checker.

A log is written from a *truth*: a list of requests ``(name, prompt, output)``
with ``prompt`` ``[p, L, k]`` and ``output`` ``[n, L, k]`` integer expert ids.
Each writer follows the layout documented in docs/importing-routes.md; the
checker compares an imported trace with the truth (cells as sets: sorted).
Used by the tests and by ``fixtures/make_import_fixtures.py``.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def random_truth(rng, *, requests, L, N, k, prompt=(2, 4), output=(1, 4), first_prompt=None):
    """Requests with distinct experts per cell; every request after the first has a prompt of at
    least two tokens (a forward of one token is a decode step) and at least one output token."""
    truth = []
    for r in range(requests):
        p = int(rng.integers(prompt[0], prompt[1] + 1)) if (r or first_prompt is None) else first_prompt
        n = int(rng.integers(output[0], output[1] + 1))
        cells = np.argsort(rng.random((p + n, L, N)), axis=2)[:, :, :k]
        truth.append((f"q{r}", cells[:p], cells[p:]))
    return truth


# ------------------------------------------------------------------ writers ---


def write_warp(truth, path, start=1):
    """One line per output token, ``tok`` counting from ``start`` again in each request."""
    with open(path, "w") as f:
        for _name, _prompt, out in truth:
            for t, cell in enumerate(out):
                f.write(json.dumps({"tok": start + t, "layers": cell.tolist()}) + "\n")
    return path


def write_vllm_json(truth, path, lines=False):
    docs = [{"id": name, "object": "text_completion",
             "prompt_routed_experts": prompt.tolist() if len(prompt) else None,
             "choices": [{"index": 0, "text": "", "routed_experts": out.tolist()}]}
            for name, prompt, out in truth]
    with open(path, "w") as f:
        if lines:
            f.writelines(json.dumps(d) + "\n" for d in docs)
        else:
            json.dump(docs[0] if len(docs) == 1 else docs, f, indent=1)
    return path


def vllm_arrays(truth):
    arrays = {}
    for name, prompt, out in truth:
        arrays[f"{name}.routed_experts"] = out.astype(np.int16)
        if len(prompt):
            arrays[f"{name}.prompt_routed_experts"] = prompt.astype(np.int16)
    return arrays


def _forwards(truth, ubatch):
    """Each request's prompt in forwards of at most ``ubatch`` tokens, then one forward per output."""
    for _name, prompt, out in truth:
        for a in range(0, len(prompt), ubatch):
            yield prompt[a : a + ubatch]
        for t in range(len(out)):
            yield out[t : t + 1]


def write_llama_csv(truth, path, layer_ids, ubatch=512, header=True):
    """``layer_id,expert_ids``: per forward, per layer, one row per token."""
    rows = ["layer_id,expert_ids"] if header else []
    for fwd in _forwards(truth, ubatch):
        for li, lid in enumerate(layer_ids):
            rows += [f"{lid},{' '.join(map(str, cell))}" for cell in fwd[:, li]]
    with open(path, "w") as f:
        f.write("\n".join(rows) + "\n")
    return path


def write_llama_moe_trace(truth, path, layer_ids, ubatch=512, header=True):
    """``layer,expert``: per forward, per layer, per token, one row per expert."""
    rows = ["layer,expert"] if header else []
    for fwd in _forwards(truth, ubatch):
        for li, lid in enumerate(layer_ids):
            rows += [f"{lid},{e}" for cell in fwd[:, li] for e in cell]
    with open(path, "w") as f:
        f.write("\n".join(rows) + "\n")
    return path


def write_megatron(truth, path, layer_ids, ubatch=512, mtp=False):
    """One record per (step, layer), as Megatron-core's router tracer writes them."""
    with open(path, "w") as f:
        for step, fwd in enumerate(_forwards(truth, ubatch)):
            for li, lid in enumerate(layer_ids):
                rec = {"step": step, "stage": "pre_dispatch", "block": "decoder", "layer": int(lid),
                       "rank": 0, "num_tokens": len(fwd), "topk": fwd.shape[2],
                       "top_indices": fwd[:, li].tolist()}
                f.write(json.dumps(rec) + "\n")
            if mtp:
                rec = {"step": step, "stage": "pre_dispatch", "block": "mtp", "mtp_idx": 0,
                       "layer": 0, "rank": 0, "num_tokens": len(fwd), "topk": fwd.shape[2],
                       "top_indices": fwd[:, 0].tolist()}
                f.write(json.dumps(rec) + "\n")
    return path


def write_flame(truth, folder, layer_ids):
    """One request's output tokens as FLAME-MoE-Traces' layer_NN.parquet files (indices, scores)."""
    folder.mkdir(parents=True, exist_ok=True)
    (_name, _prompt, out), = truth
    k = out.shape[2]
    for li, lid in enumerate(layer_ids):
        scores = np.sort(np.random.default_rng(lid).random((len(out), k)), axis=1)[:, ::-1]
        table = pa.table({
            "scores": pa.array(scores.astype(np.float32).tolist(), pa.list_(pa.float32())),
            "indices": pa.array(out[:, li].astype(np.int16).tolist(), pa.list_(pa.int16())),
        })
        pq.write_table(table, folder / f"layer_{lid:02d}.parquet")
    return folder


# ------------------------------------------------------------------ checker ---


def check_trace(trace, truth, names=None):
    """The trace holds exactly the truth: requests in order, prompt lengths and prefill unions,
    output tokens 0..n-1 with the same experts in every cell."""
    names = names or [name for name, _p, _o in truth]
    assert list(trace.requests.request_id) == names
    L, N = trace.geometry.num_layers, trace.geometry.num_experts
    for r, (_name, prompt, out) in enumerate(truth):
        a, b = trace.request_positions(r)
        assert b - a == len(out)
        assert trace.pos_index[a:b].tolist() == list(range(len(out)))
        assert np.array_equal(trace.root_routes[a:b], np.sort(out, axis=2))
        assert trace.requests.prompt_len[r] == len(prompt)
        union = np.zeros((L, N), dtype=bool)
        for cell in prompt:
            union[np.arange(L)[:, None], cell] = True
        assert np.array_equal(trace.requests.prefill_union[r], union)


def refused(tmp_path, capsys, argv, *fragments):
    """``simmoe import-routes ARGV`` fails with one line holding every fragment, exit 2, and leaves
    ``tmp_path`` as it was (no trace, no temporary file)."""
    from simmoe.cli import main

    before = sorted(p.name for p in tmp_path.iterdir())
    rc = main(["import-routes", *map(str, argv)])
    _out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("simmoe import-routes: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    return lines[0]
