"""Record a trace: at every output position, the full pool and one target forward over it.

For each request (SpecFit §2, the trace contract in ``simmoe/trace/schema.py``):
prefill (its expert union per layer and its time), then for every output
position t the drafter grows the pool from prompt + output[:t+1] (root =
output[t]), and one tree forward over root + the full pool gives every node's
routes and whether the target's greedy prediction agrees with it.  Only the
root's KV row is kept, so the recorded output is exactly the greedy
autoregressive output (at ``temperature > 0``: the sampled output of
:mod:`hwprobe.sampling`, whose per-node p_T and CDF are recorded too).
Cost: one pool and one (1 + |pool|)-token forward per output token.

Crash safety: each finished request is written atomically to
``<out>.parts/NNNNN.npz``; a rerun with the same arguments skips finished
requests; the trace is assembled and written atomically at the end, then the
parts folder is removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from hwprobe.atomic import write_atomic, write_text_atomic
from hwprobe.cli import HwprobeError
from hwprobe.device import synchronize
from hwprobe.pool import PoolSpec, build_pool
from hwprobe.routes import RouteRecorder
from hwprobe.specdecode import prefill
from hwprobe.tree import cache_length, compact_cache, greedy_verdict, tree_forward


@dataclass
class RequestRecord:
    """Everything recorded for one request (column arrays, like the trace)."""

    request_id: str
    dataset: str
    prompt_len: int
    prefill_union: np.ndarray          # bool [L, N]
    prefill_ms: float
    root_token: np.ndarray             # int32 [P]
    root_routes: np.ndarray            # int64 [P, L, k]
    node_count: np.ndarray             # int64 [P]
    node_parent: np.ndarray
    node_level: np.ndarray
    node_token: np.ndarray
    node_q: np.ndarray
    node_p: np.ndarray
    node_agree: np.ndarray
    node_target_prob: np.ndarray
    node_routes: np.ndarray            # [M, L, k]
    draft_ms: np.ndarray               # float32 [P, depth]
    verify_ms: np.ndarray              # float64 [P]: the tree forward
    union: np.ndarray                  # int64 [P]: F of root + full pool (Eq. 1)
    copies: np.ndarray                 # int64 [P]: expert copies of the tree forward
    copy_ms: np.ndarray                # float64: durations of (up to 1000 of) the request's copies
    prefill_copies: int = 0
    output_text: str = ""
    extra: dict = field(default_factory=dict)
    node_target_cdf: np.ndarray | None = None  # at temperature > 0: target mass below each node's token

    def save(self, path: Path) -> None:
        arrays = {k: v for k, v in self.__dict__.items() if isinstance(v, np.ndarray)}
        scalars = {k: v for k, v in self.__dict__.items() if not isinstance(v, np.ndarray)}

        def write(tmp):
            with open(tmp, "wb") as fh:
                np.savez(fh, _scalars=np.array(json.dumps(scalars)), **arrays)
        write_atomic(path, write)

    @classmethod
    def load(cls, path: Path) -> RequestRecord:
        with np.load(path, allow_pickle=False) as z:
            scalars = json.loads(str(z["_scalars"]))
            arrays = {k: z[k] for k in z.files if k != "_scalars"}
        return cls(**scalars, **arrays)


def check_room(prompts, encoded, max_total_tokens: int | None) -> None:
    """Refuse, before loading the model, prompts that leave no output position under ``--max-total-tokens``."""
    if max_total_tokens is None:
        return
    if max_total_tokens < 2:
        raise HwprobeError("--max-total-tokens must be >= 2")
    bad = [(p.question_id, len(ids)) for p, ids in zip(prompts, encoded) if len(ids) >= max_total_tokens]
    if bad:
        more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
        listed = ", ".join(f"{q} ({n} tokens)" for q, n in bad[:3])
        raise HwprobeError(f"--max-total-tokens {max_total_tokens} leaves no room for output after the prompts of "
                           f"requests {listed}{more}")


def union_size(routes: np.ndarray) -> int:
    """Σ_ℓ |⋃ rows' experts in layer ℓ| for routes ``[rows, L, k]`` (Eq. 1)."""
    return int(sum(len(np.unique(routes[:, layer])) for layer in range(routes.shape[1])))


def record_request(model, backend, drafter, prompt_ids: list[int], *, request_id: str, dataset: str,
                   max_new_tokens: int, spec: PoolSpec, num_experts: int, eos=None,
                   max_total_tokens: int | None = None, progress=None, temperature: float = 0.0,
                   sampling_seed: int = 0) -> RequestRecord:
    """Record one request (see the module docstring).

    ``temperature > 0``: the output is sampled at that temperature with the
    position-keyed uniforms of ``sampling_seed`` (:mod:`hwprobe.sampling`),
    and every node gets p_T of its token and the target mass below it;
    agreement stays greedy (the target's argmax).
    """
    from hwprobe.sampling import key_of, sample_token

    key = key_of(request_id)
    device = next(model.parameters()).device

    def sync():
        return synchronize(device)

    feats = getattr(drafter, "needs_features", False)
    n_new = max_new_tokens
    if max_total_tokens is not None:
        n_new = min(n_new, max_total_tokens - len(prompt_ids))
        if n_new < 1:
            raise HwprobeError(f"request {request_id}: prompt of {len(prompt_ids)} tokens leaves no room "
                               f"under the {max_total_tokens}-token limit")
    drafter.start(list(prompt_ids))
    with RouteRecorder(model) as rec:
        backend.collect()
        sync()
        t0 = time.perf_counter()
        cache, out, root = prefill(model, list(prompt_ids), hidden_states=feats)
        sync()
        prefill_ms = (time.perf_counter() - t0) * 1e3
        if temperature > 0:
            root = sample_token(out.logits[0, -1], temperature, sampling_seed, key, 0)
        pr = rec.pop()
        prefill_union = np.zeros((pr.shape[1], num_experts), dtype=bool)
        for layer in range(pr.shape[1]):
            prefill_union[layer, np.unique(pr[:, layer])] = True
        prefill_copies = backend.collect().total_copies
        if feats:
            drafter.observe(list(prompt_ids), out)
        rows: dict[str, list] = {k: [] for k in ("root_token", "root_routes", "node_count", "parent", "level",
                                                 "token", "q", "p", "agree", "tprob", "routes", "draft",
                                                 "verify", "union", "copies", "copy_ms", "tcdf")}
        tokens = [root]
        for t in range(n_new):
            context = list(prompt_ids) + tokens
            pool = build_pool(drafter, context, spec, sync)
            n = cache_length(cache)
            sync()
            t1 = time.perf_counter()
            o = tree_forward(model, cache, root, pool, hidden_states=feats)
            logits = o.logits[0]
            sync()
            verify_ms = (time.perf_counter() - t1) * 1e3
            routes = rec.pop()
            v = greedy_verdict(pool, logits)
            tprob = _target_probs(pool, logits, temperature, rows["tcdf"])
            compact_cache(cache, n, [0])            # keep the root only: output stays greedy AR
            if feats:
                drafter.observe(context, o, [0])
            _append_position(rows, root, pool, routes, v.agree, tprob, verify_ms, backend.collect(), spec.depth)
            if progress is not None:
                progress(1)
            if eos is not None and root == eos:
                break
            root = (sample_token(logits[0], temperature, sampling_seed, key, t + 1) if temperature > 0
                    else int(v.argmax[0]))
            tokens.append(root)
    return _request_record(rows, request_id=str(request_id), dataset=dataset, prompt_len=len(prompt_ids),
                           prefill_union=prefill_union, prefill_ms=prefill_ms, prefill_copies=int(prefill_copies),
                           top_k=pr.shape[2], sampled=temperature > 0)


def _target_probs(pool, logits: torch.Tensor, temperature: float, tcdf_rows: list) -> np.ndarray:
    """Each node's target probability of its token given its path (p_T at T > 0, whose CDF joins ``tcdf_rows``)."""
    if temperature > 0:
        from hwprobe.sampling import node_fields

        tprob, tcdf = node_fields(pool, logits, temperature)
        tcdf_rows.append(tcdf)
        return tprob
    if not len(pool):
        return np.zeros(0, np.float32)
    par_rows = torch.as_tensor([p + 1 for p in pool.parent], dtype=torch.long, device=logits.device)
    probs = torch.softmax(logits.index_select(0, par_rows).float(), -1)
    tprob = probs.gather(1, torch.as_tensor(pool.token, device=probs.device)[:, None])[:, 0]
    return tprob.to("cpu").numpy()


def _append_position(rows: dict[str, list], root: int, pool, routes: np.ndarray, agree, tprob: np.ndarray,
                     verify_ms: float, snap, depth: int) -> None:
    """Append one output position (root, full pool, routes, times, copies) to the request's columns."""
    rows["root_token"].append(root)
    rows["root_routes"].append(routes[0])
    rows["node_count"].append(len(pool))
    rows["parent"] += pool.parent
    rows["level"] += pool.level
    rows["token"] += pool.token
    rows["q"] += pool.q
    rows["p"] += pool.p
    rows["agree"].append(agree)
    rows["tprob"].append(tprob)
    rows["routes"].append(routes[1:])
    lm = np.zeros(depth, np.float32)
    lm[: len(pool.level_ms)] = pool.level_ms
    rows["draft"].append(lm)
    rows["verify"].append(verify_ms)
    rows["union"].append(union_size(routes))
    rows["copies"].append(snap.total_copies)
    if len(rows["copy_ms"]) < 1000:
        rows["copy_ms"] += snap.copy_ms[: 1000 - len(rows["copy_ms"])]


def _request_record(rows: dict[str, list], *, request_id: str, dataset: str, prompt_len: int,
                    prefill_union: np.ndarray, prefill_ms: float, prefill_copies: int, top_k: int,
                    sampled: bool) -> RequestRecord:
    """The request's columns as arrays in the record's dtypes."""
    L, k = prefill_union.shape[0], top_k

    def cat(xs, dt, shape=(0,)):
        return np.concatenate(xs).astype(dt) if xs else np.zeros(shape, dt)

    return RequestRecord(
        request_id=request_id, dataset=dataset, prompt_len=prompt_len,
        prefill_union=prefill_union, prefill_ms=prefill_ms,
        root_token=np.asarray(rows["root_token"], np.int32),
        root_routes=np.stack(rows["root_routes"]).astype(np.int64),
        node_count=np.asarray(rows["node_count"], np.int64),
        node_parent=np.asarray(rows["parent"], np.int16), node_level=np.asarray(rows["level"], np.int8),
        node_token=np.asarray(rows["token"], np.int32), node_q=np.asarray(rows["q"], np.float32),
        node_p=np.asarray(rows["p"], np.float32), node_agree=cat(rows["agree"], bool),
        node_target_prob=cat(rows["tprob"], np.float32),
        node_routes=cat(rows["routes"], np.int64, (0, L, k)),
        draft_ms=np.stack(rows["draft"]).astype(np.float32),
        verify_ms=np.asarray(rows["verify"], np.float64), union=np.asarray(rows["union"], np.int64),
        copies=np.asarray(rows["copies"], np.int64), copy_ms=np.asarray(rows["copy_ms"], np.float64),
        prefill_copies=prefill_copies,
        node_target_cdf=cat(rows["tcdf"], np.float32) if sampled else None,
    )


def assemble_trace(records: list[RequestRecord], *, meta: dict):
    """Concatenate request records into a :class:`simmoe.trace.Trace` (routes in the geometry's dtype)."""
    from simmoe.trace import ModelGeometry, Requests, Trace

    geom = ModelGeometry.from_dict(meta["geometry"])
    rd = geom.route_dtype
    counts = [len(r.root_token) for r in records]
    node_counts = np.concatenate([r.node_count for r in records])
    requests = Requests(
        request_id=np.array([r.request_id for r in records], dtype=object),
        dataset=np.array([r.dataset for r in records], dtype=object),
        prompt_len=np.array([r.prompt_len for r in records], np.int32),
        output_len=np.array(counts, np.int32),
        prefill_union=np.stack([r.prefill_union for r in records]).astype(bool),
        prefill_time_ms=np.array([r.prefill_ms for r in records], np.float64),
    )
    cat = lambda name: np.concatenate([getattr(r, name) for r in records])  # noqa: E731
    return Trace(
        meta=meta, requests=requests,
        pos_request=np.repeat(np.arange(len(records), dtype=np.int32), counts),
        pos_index=np.concatenate([np.arange(c, dtype=np.int32) for c in counts]),
        root_token=cat("root_token").astype(np.int32),
        root_routes=cat("root_routes").astype(rd),
        node_ptr=np.concatenate([[0], np.cumsum(node_counts)]).astype(np.int64),
        node_parent=cat("node_parent").astype(np.int16), node_level=cat("node_level").astype(np.int8),
        node_token=cat("node_token").astype(np.int32), node_q=cat("node_q").astype(np.float32),
        node_p=cat("node_p").astype(np.float32), node_agree=cat("node_agree").astype(bool),
        node_routes=cat("node_routes").astype(rd),
        node_target_prob=cat("node_target_prob").astype(np.float32),
        node_target_cdf=(cat("node_target_cdf").astype(np.float32)
                         if records and all(r.node_target_cdf is not None for r in records) else None),
        draft_time_ms=cat("draft_ms").astype(np.float32),
    )


class PartsFolder:
    """``<out>.parts/``: one file per finished request plus ``run.json`` naming the run."""

    def __init__(self, out: Path, fingerprint: dict):
        self.dir = Path(str(out) + ".parts")
        self.fingerprint = fingerprint
        key = json.dumps(fingerprint, sort_keys=True)
        self.key = hashlib.sha256(key.encode()).hexdigest()[:16]

    def check(self) -> None:
        """Refuse parts of a different recording (before anything is loaded or written)."""
        if self.dir.exists():
            try:
                old = json.loads((self.dir / "run.json").read_text())
            except (OSError, json.JSONDecodeError):
                old = None
            if not old or old.get("key") != self.key:
                raise HwprobeError(f"{self.dir} holds parts of a different recording (other arguments); "
                                   "rerun with the same arguments to resume, or remove the folder")

    def open(self) -> None:
        """Create the folder and its ``run.json`` (once the model is loaded and the run can start)."""
        self.check()
        if not self.dir.exists():
            self.dir.mkdir(parents=True)
            write_text_atomic(self.dir / "run.json", json.dumps({"key": self.key, "run": self.fingerprint}, indent=1))

    @contextlib.contextmanager
    def removed_if_nothing_done(self):
        """On an error (not an interruption) before any request is finished, remove the folder again.

        A run refused by bad input or out of memory then leaves nothing behind,
        and the corrected rerun is not taken for a different recording.
        """
        try:
            yield
        except Exception:
            if self.dir.exists() and not any(self.dir.glob("*.npz")):
                self.remove()
            raise

    def part(self, index: int) -> Path:
        return self.dir / f"{index:05d}.npz"

    def done(self, index: int) -> RequestRecord | None:
        p = self.part(index)
        if not p.exists():
            return None
        try:
            return RequestRecord.load(p)
        except (OSError, ValueError, KeyError, TypeError):
            p.unlink(missing_ok=True)        # unreadable part: record the request again
            return None

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
