"""The replay regression grid: `simmoe replay --json` over every setting axis, and how to run it.

Each entry is one ``simmoe replay`` command line (every selector at once), so
the grid covers, on the GSM8K trace and a temperature-1 ``qa`` trace: all
selectors (``--selectors all``, plus ``specfit-prefetch`` where it runs),
every cache policy (``lfu`` and ``belady`` under both admission rules), every
prefetch policy, batch 1 / 4 / 16, every timing model, route prediction, and
one fitted, one physical offload and one resident profile.  Axes are crossed
where a setting interacts with another (cache × batch, prefetch × cache ×
route accuracy, profile × batch × timing); single values elsewhere.  The
CNN/DM trace (long prompts) replays one entry per axis (``CNNDM_SETTINGS``),
not the crosses: those run the same code on other data.  A resident profile
ignores the cache, so it replays one cache setting.  Entries at batch 1
replay the first request (``REQUESTS``); batched ones 4 or 16 requests,
which carry the cache from request to request.

``record.py`` writes the corpus; ``test_corpus.py`` replays the grid and
requires every recorded number to be reproduced exactly.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).with_name("corpus.json.gz")

FITTED = "a100-pcie-40gb"                              # fitted to SpecFit's published figures
OFFLOAD = "qwen3-30b-a3b@a100-pcie-40gb+pcie4-x16"     # physical, experts copied over PCIe
RESIDENT = "qwen3-30b-a3b@a100-sxm4-80gb"              # physical, every expert in HBM

# selections do not depend on the cache: settings that vary only the cache or the timing replay a few selectors
FEW = "eagle3,evict,specfit,oracle"
PREFETCH_SELECTORS = "ar,eagle3,evict,coverage,specfit,optimal,oracle"
CACHES = ("lru", "lfu", "belady", "static", "none")
PREFETCH = ("draft", "next-layer", "oracle")

# the CNN/DM trace: one entry per axis (the crosses run on GSM8K)
CNNDM_SETTINGS = {"fitted/lru-12-all", "fitted/belady-12", "fitted/lru-0", "fitted/lru-48", "fitted/closed",
                  "fitted/route-0.6", "fitted/batch4-lru-12", "fitted/prefetch-draft-lru-12",
                  "offload/lru-12", "offload/prefetch-draft-lru-12", "resident/lru-48", "resident/batch4",
                  "resident/closed"}

# requests replayed at batch 1 (batched entries replay 4, or 16)
REQUESTS = 1

# the temperature-1 trace: simmoe synth --preset qa --requests QA_REQUESTS --temperature 1 --seed 0
QA_REQUESTS = 4


def _entries_for(trace: str, requests: int, profiles: dict[str, str], extra: tuple = ()) -> list[dict]:
    out = []

    def add(name, *args, hardware="fitted", req=requests):
        out.append({"name": f"{trace}/{hardware}/{name}", "trace": trace,
                    "argv": ["--hardware", profiles[hardware], "--requests", str(req), *extra, *args]})

    if "fitted" in profiles:
        add("lru-12-all", "--slots", "12", "--selectors", "all")
        for cache in CACHES:                      # every cache policy, at a small and a large size
            add(f"{cache}-12", "--cache", cache, "--slots", "12", "--selectors", FEW)
        for cache in ("lfu", "belady"):           # the admission rule these two act on (forced is the default)
            add(f"{cache}-12-bypass", "--cache", cache, "--slots", "12", "--admission", "bypass", "--selectors", FEW)
        add("lru-0", "--slots", "0", "--selectors", FEW)
        add("lru-48", "--slots", "48", "--selectors", FEW)
        add("belady-48", "--cache", "belady", "--slots", "48", "--selectors", FEW)
        add("simpy", "--slots", "12", "--timing", "simpy", "--selectors", "eagle3,specfit", req=1)
        add("closed", "--slots", "12", "--timing", "closed", "--selectors", FEW)
        add("route-0.6", "--slots", "12", "--route-accuracy", "0.6", "--seed", "3")
        for cache in CACHES:                      # batching × every cache
            add(f"batch4-{cache}-12", "--cache", cache, "--slots", "12", "--batch", "4",
                *(() if cache == "lru" else ("--selectors", FEW)), req=max(requests, 4))
        add("batch4-route-0.6", "--slots", "12", "--batch", "4", "--route-accuracy", "0.6", req=max(requests, 4))
        for policy in PREFETCH:                   # prefetching × cache or none × predicted routes
            sel = ("--selectors", PREFETCH_SELECTORS + ("" if policy == "oracle" else ",specfit-prefetch"))
            add(f"prefetch-{policy}-lru-12", "--slots", "12", "--prefetch", policy, *sel)
            add(f"prefetch-{policy}-none-0", "--slots", "0", "--prefetch", policy, *sel)
            add(f"prefetch-{policy}-lru-12-route-0.6", "--slots", "12", "--prefetch", policy,
                "--route-accuracy", "0.6", "--seed", "5", *sel)
        add("specfit-prefetch-lru-12", "--slots", "12", "--selectors", "specfit,specfit-prefetch")
        add("specfit-prefetch-draft-lru-48", "--slots", "48", "--prefetch", "draft",
            "--selectors", "eagle3,specfit,specfit-prefetch")
        add("prefetch-draft-no-saved", "--slots", "12", "--prefetch", "draft", "--no-time-saved")
    if "offload" in profiles:
        add("lru-12", "--slots", "12", hardware="offload")
        add("none-0", "--cache", "none", "--slots", "0", hardware="offload")
        add("belady-24", "--cache", "belady", "--slots", "24", hardware="offload")
        add("batch4-lru-12", "--slots", "12", "--batch", "4", hardware="offload", req=max(requests, 4))
        add("prefetch-draft-lru-12", "--slots", "12", "--prefetch", "draft",
            "--selectors", PREFETCH_SELECTORS + ",specfit-prefetch", hardware="offload")
        add("prefetch-next-layer-none-0", "--slots", "0", "--prefetch", "next-layer",
            "--selectors", PREFETCH_SELECTORS, hardware="offload")
        add("simpy", "--slots", "12", "--timing", "simpy", "--selectors", "eagle3,specfit", hardware="offload",
            req=1)
    if "resident" in profiles:
        add("lru-48", "--slots", "48", hardware="resident")
        add("batch4", "--slots", "48", "--batch", "4", hardware="resident", req=max(requests, 4))
        add("closed", "--slots", "48", "--timing", "closed", hardware="resident")
    return out


def entries() -> list[dict]:
    """Every command line of the grid, each named ``trace/profile/setting``."""
    both = {"fitted": FITTED, "offload": OFFLOAD, "resident": RESIDENT}
    cnndm = [e for e in _entries_for("cnndm", REQUESTS, both) if e["name"].removeprefix("cnndm/") in CNNDM_SETTINGS]
    grid = _entries_for("gsm8k", REQUESTS, both) + cnndm
    # batch 16 (the shipped traces hold 21 and 24 requests)
    grid.append({"name": "gsm8k/fitted/batch16-lru-12", "trace": "gsm8k",
                 "argv": ["--hardware", FITTED, "--requests", "16", "--slots", "12", "--batch", "16"]})
    grid.append({"name": "gsm8k/fitted/batch16-belady-48", "trace": "gsm8k",
                 "argv": ["--hardware", FITTED, "--requests", "16", "--slots", "48", "--cache", "belady",
                          "--batch", "16", "--selectors", "ar,eagle3,evict,specfit,oracle"]})
    grid.append({"name": "cnndm/resident/batch16", "trace": "cnndm",
                 "argv": ["--hardware", RESIDENT, "--requests", "16", "--batch", "16",
                          "--selectors", "ar,eagle3,evict,specfit,oracle"]})
    # temperature 1 on EVICT's qa workload (K = 32: the physical profiles price it)
    qa = {"offload": OFFLOAD, "resident": RESIDENT}
    grid += _entries_for("qa-t1", REQUESTS, qa, extra=("--temperature", "1"))
    grid.append({"name": "qa-t1/offload/prefetch-oracle-lru-12", "trace": "qa-t1",
                 "argv": ["--hardware", OFFLOAD, "--requests", str(REQUESTS), "--temperature", "1",
                          "--slots", "12", "--prefetch", "oracle"]})
    grid.append({"name": "qa-t1/offload/sampling-seed-7", "trace": "qa-t1",
                 "argv": ["--hardware", OFFLOAD, "--requests", str(REQUESTS), "--temperature", "1",
                          "--slots", "12", "--seed", "7"]})
    return grid


def qa_trace(folder: Path) -> Path:
    """Generate the temperature-1 qa trace (deterministic: seed 0) into ``folder``."""
    import contextlib
    import io

    from simmoe.cli import main

    path = folder / "qa-t1.parquet"
    if not path.exists():
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            rc = main(["synth", "--preset", "qa", "--requests", str(QA_REQUESTS), "--temperature", "1",
                       "--seed", "0", "--out", str(path), "--no-progress"])
        if rc != 0:
            raise RuntimeError(f"simmoe synth --preset qa exited {rc}")
    return path


def trace_digest(path: Path) -> str:
    """A digest of what a replay reads from a trace, to tell a changed trace from a changed replay."""
    from simmoe.trace.io import read_trace

    t = read_trace(path)
    h = hashlib.sha256()
    for a in (t.root_routes, t.node_ptr, t.node_parent, t.node_level, t.node_p, t.node_q,
              t.node_agree, t.node_routes, np.asarray(t.requests.output_len), np.asarray(t.requests.prompt_len)):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def trace_paths(folder: Path) -> dict[str, Path]:
    return {"gsm8k": ROOT / "traces" / "gsm8k.parquet", "cnndm": ROOT / "traces" / "cnndm.parquet",
            "qa-t1": qa_trace(folder)}


def run_entry(entry: dict, paths: dict[str, Path]) -> dict:
    """Run one grid entry in this process; the JSON it writes, as a dict."""
    import contextlib
    import io

    from simmoe.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        argv = ["replay", str(paths[entry["trace"]]), *entry["argv"], "--json", str(out),
                "--workers", "1", "--no-progress"]
        if "--selectors" not in entry["argv"]:
            argv += ["--selectors", "all"]
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            rc = main(argv)
        if rc != 0:
            raise RuntimeError(f"{entry['name']}: exit {rc}: {buf.getvalue().strip()[-400:]}")
        return json.loads(out.read_text())


def numbers(doc: dict) -> dict:
    """What the corpus compares: every counter of every selector, the baseline's, and the prefetch setting."""
    return {"baseline": doc["baseline"], "results": doc["results"],
            **({"batch": doc["batch"]} if "batch" in doc else {}),
            **({"prefetch": doc["prefetch"]} if "prefetch" in doc else {})}


def load_corpus() -> dict:
    with gzip.open(CORPUS, "rt") as f:
        return json.load(f)
