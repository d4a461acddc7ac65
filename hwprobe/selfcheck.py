"""Checks shared by ``hwprobe selftest``: offloaded vs unmodified forward, LRU copy counts.

:func:`lru_copies` is a plain LRU over per-forward expert unions, written
independently of :mod:`hwprobe.offload` (an ``OrderedDict`` per layer; hits
touched in ascending id, then misses inserted in ascending id; capacity =
slots), so the backend's counters can be checked against it.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch


def lru_copies(unions_per_forward: list[list[set[int]]], slots: int) -> int:
    """Copies an LRU cache of ``slots`` per layer makes over the forwards' per-layer unions."""
    total = 0
    caches: list[OrderedDict] = []
    for layers in unions_per_forward:
        while len(caches) < len(layers):
            caches.append(OrderedDict())
        for cache, union in zip(caches, layers):
            hits = sorted(e for e in union if e in cache)
            misses = sorted(e for e in union if e not in cache)
            for e in hits:
                cache.move_to_end(e)
            for e in misses:
                cache[e] = True
                total += 1
                while len(cache) > slots:
                    cache.popitem(last=False)
            while len(cache) > slots:
                cache.popitem(last=False)
    return total


def unions(routes: np.ndarray) -> list[set[int]]:
    """Per-layer expert unions of a forward's routes ``[tokens, L, k]``."""
    return [set(np.unique(routes[:, layer]).tolist()) for layer in range(routes.shape[1])]


@dataclass
class OffloadCheck:
    max_abs_diff: float
    same_argmax: float          # fraction of positions with the same argmax
    tokens_equal: bool          # greedy decode identical
    copies: int
    reference_copies: int

    @property
    def ok(self) -> bool:
        return self.tokens_equal and self.copies == self.reference_copies and self.same_argmax == 1.0


def check_offload(model, device: torch.device, *, slots: int, prompt: list[int], new_tokens: int = 8,
                  atol: float = 1e-4) -> OffloadCheck:
    """Compare an offloaded copy of ``model`` (on ``device``) with the unmodified model (on ``device``).

    ``model`` (on the CPU) stays unmodified and ends on ``device``; cost: one extra
    copy of the model in host memory.
    """
    from hwprobe.offload import install_offload
    from hwprobe.routes import RouteRecorder
    from hwprobe.specdecode import greedy_generate
    from hwprobe.tree import lm_forward, new_cache

    off = copy.deepcopy(model)
    ref = model.to(device)
    backend = install_offload(off, slots=slots, device=device)
    ids = torch.as_tensor([prompt], device=device)
    with torch.no_grad():
        a = lm_forward(ref, ids, new_cache(ref)).logits[0].float()
        with RouteRecorder(off) as rec:
            # decode step by step so every forward's routes are known
            cache = new_cache(off)
            out = lm_forward(off, ids, cache)
            b = out.logits[0].float()
            fwd_unions = [unions(rec.pop())]
            t = int(out.logits[0, -1].argmax())
            tok_off = [t]
            while len(tok_off) < new_tokens:
                out = lm_forward(off, torch.as_tensor([[t]], device=device), cache)
                fwd_unions.append(unions(rec.pop()))
                t = int(out.logits[0, -1].argmax())
                tok_off.append(t)
    copies = backend.collect().total_copies
    tok_ref = greedy_generate(ref, prompt, new_tokens)
    diff = float((a - b).abs().max())
    same = float((a.argmax(-1) == b.argmax(-1)).float().mean())
    del off
    return OffloadCheck(diff, same, tok_ref == tok_off, copies, lru_copies(fwd_unions, slots))


# --------------------------------------------------------------------------
# GPU readiness checks (hwprobe selftest); each also runs, reduced, on the CPU
# --------------------------------------------------------------------------
@dataclass
class MatrixRow:
    slots: int
    inflight: int
    identical: bool             # offloaded logits bit-identical to the resident reference
    ahead: int                  # copies started before the computation max_inflight misses earlier had finished
    copies: int


@dataclass
class MatrixCheck:
    rows: list
    negative_identical: bool | None   # the control without waits (None: not meaningful here, copies are synchronous)
    pinned_bytes: int
    tensor_bytes: int
    cuda: bool

    @property
    def ok(self) -> bool:
        pinned = (self.pinned_bytes == self.tensor_bytes) if self.cuda else True
        control = self.negative_identical is not True      # without waits the logits must differ (GPU)
        return all(r.identical and r.ahead == 0 and r.copies > 0 for r in self.rows) and pinned and control


def _ahead(backend) -> int:
    n = 0
    for layer in backend.layers:
        for iv, computed in layer.audit or []:
            if computed is None:
                continue
            if isinstance(iv.start, float):       # wall clock: copies are synchronous, never ahead
                continue
            if computed.elapsed_time(iv.start) < 0:
                n += 1
    return n


def offload_matrix(config: str, device: torch.device, *, slots=(0, 8, 48), inflight=(1, 2), prompt_len: int = 64,
                   delay_cycles: int = 2_000_000, seed: int = 1) -> MatrixCheck:
    """Offloaded vs resident logits, bit for bit, for every (slots, copies in flight), copies delayed.

    The reference runs the same per-expert arithmetic from device-resident
    weights (``install_offload(resident=True)``), so any difference is a copy
    read too early, a buffer overwritten too soon, or a wrong expert.  On CUDA
    a busy-wait of ``delay_cycles`` is queued before every copy, so a missing
    wait reads stale weights; the negative control drops the waits (and zeroes
    the buffers) and must then differ.  Copies started more than
    ``max_inflight`` ahead of the computation are counted from CUDA events.
    Pinned host bytes are compared with the expert tensors' bytes.
    """
    from hwprobe.models import load_target
    from hwprobe.offload import install_offload
    from hwprobe.tree import lm_forward, new_cache

    cuda = device.type == "cuda"
    lm = load_target(config=config, dtype=torch.float32, seed=seed, quiet=True)
    ref = copy.deepcopy(lm.model)
    install_offload(ref, slots=0, device=device, resident=True)
    vocab = int(lm.model.config.get_text_config().vocab_size)
    ids = torch.as_tensor([[3 + (i * 37) % (vocab - 3) for i in range(prompt_len)]], device=device)
    expected = lm_forward(ref, ids, new_cache(ref)).logits
    del ref
    backend = install_offload(lm.model, slots=slots[0], device=device)
    streams = backend.streams
    if cuda:
        streams.timing_events = True
        streams.delay_cycles = delay_cycles
    rows = []
    for c in inflight:
        backend.set_inflight(c)
        for s in slots:
            backend.set_slots(s)
            backend.collect()
            for layer in backend.layers:
                layer.audit = []
            same = all(torch.equal(lm_forward(lm.model, ids, new_cache(lm.model)).logits, expected) for _ in range(2))
            snap = backend.collect()
            rows.append(MatrixRow(s, c, same, _ahead(backend), snap.total_copies))
    negative = None
    if cuda:
        backend.set_inflight(2)
        backend.set_slots(0)
        for layer in backend.layers:
            layer.dev.zero_()
        streams.skip_waits = True
        negative = torch.equal(lm_forward(lm.model, ids, new_cache(lm.model)).logits, expected)
        streams.skip_waits = False
        streams.delay_cycles = 0
        synchronize_all(device)
    return MatrixCheck(rows, negative, int(getattr(streams, "pinned_bytes", 0)), backend.host_bytes, cuda)


def synchronize_all(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def oom_probe(config: str, device: torch.device, prompts: str, folder, *, fraction: float = 0.005,
              timeout: int = 300) -> tuple[bool, str]:
    """``hwprobe record`` in a subprocess limited to ``fraction`` of the device memory.

    Passes when it exits with status 2, one line naming the out-of-memory
    condition and the advice, and leaves no trace and no parts folder.
    """
    import os
    import subprocess
    import sys
    from pathlib import Path

    out = Path(folder) / "oom.parquet"
    cmd = [sys.executable, "-m", "hwprobe", "record", "--config", config, "--device", str(device),
           "--prompts", str(prompts), "--category", "math_reasoning", "--limit", "1", "--max-new-tokens", "2",
           "--slots", "128", "--out", str(out), "--quiet"]
    env = {**os.environ, "HWPROBE_MEMORY_FRACTION": str(fraction)}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    err = [line for line in p.stderr.strip().splitlines() if line.strip()]
    left = out.exists() or Path(str(out) + ".parts").exists()
    ok = p.returncode == 2 and len(err) == 1 and "out of device memory" in err[0] and not left
    return ok, f"exit {p.returncode}, {len(err)} stderr line(s): {err[-1] if err else ''!r}, output left: {left}"


def live_dtypes(config: str, device: torch.device, prompts: str, folder, *, tokens: int = 16) -> tuple[bool, str]:
    """``hwprobe live`` in float32 and in bfloat16: both must pass the lossless check; argmax flips are counted.

    A flip is a position where greedy and speculative decoding of the bf16 run
    chose different tokens within the tie tolerance (accepted and counted);
    the bf16 and float32 outputs are compared too (rounding may change the
    text of a random-weight model; that is reported, not failed).
    """
    import json
    from pathlib import Path

    from hwprobe.cli import main as hw_main

    runs = {}
    for dtype in ("float32", "bfloat16"):
        out = Path(folder) / f"live-{dtype}.jsonl"
        rc = hw_main(["live", "--config", config, "--device", str(device), "--dtype", dtype, "--prompts",
                      str(prompts), "--category", "math_reasoning", "--limit", "1", "--max-new-tokens", str(tokens),
                      "--selector", "eagle3", "--slots", "16", "--out", str(out), "--quiet"])
        if rc:
            return False, f"live --dtype {dtype} exited {rc}"
        lines = [json.loads(x) for x in out.read_text().splitlines()]
        reqs = [x for x in lines if x.get("type") == "request"]
        runs[dtype] = (sum(r.get("near_ties", 0) for r in reqs), [t for r in reqs for t in r["tokens"]])
    flips = runs["bfloat16"][0] + runs["float32"][0]
    a, b = runs["float32"][1], runs["bfloat16"][1]
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return True, (f"lossless in both; argmax flips within the tie tolerance: bf16 {runs['bfloat16'][0]}, "
                  f"fp32 {runs['float32'][0]} ({flips} in all); bf16 and fp32 outputs "
                  f"{'identical' if first is None else f'differ from position {first}'}")
