"""Record the replay regression corpus: ``python tests/regression/record.py [--only NAME ...]``.

Runs every entry of :mod:`grid` and writes ``corpus.json.gz`` beside this
file: per entry its command line and the numbers ``simmoe replay --json``
printed, plus a digest of each trace.  Re-record only when a change of a
number is intended, and list the changed entries with the reason in the
commit that makes the change.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import grid  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="re-record only these entries (names)")
    args = ap.parse_args()
    old = grid.load_corpus() if (args.only and grid.CORPUS.exists()) else {"entries": {}}
    with tempfile.TemporaryDirectory() as tmp:
        paths = grid.trace_paths(Path(tmp))
        digests = {k: grid.trace_digest(p) for k, p in paths.items()}
        entries = {}
        t0 = time.perf_counter()
        for e in grid.entries():
            if args.only and e["name"] not in args.only:
                if e["name"] in old["entries"]:
                    entries[e["name"]] = old["entries"][e["name"]]
                continue
            t1 = time.perf_counter()
            doc = grid.run_entry(e, paths)
            entries[e["name"]] = {"trace": e["trace"], "argv": e["argv"], "numbers": grid.numbers(doc)}
            print(f"{e['name']:<55} {time.perf_counter() - t1:6.2f} s", flush=True)
    corpus = {"traces": digests, "entries": entries}
    raw = json.dumps(corpus, indent=1, sort_keys=True).encode()
    with open(grid.CORPUS, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as z:
        z.write(raw)
    print(f"{len(entries)} entries in {time.perf_counter() - t0:.1f} s -> {grid.CORPUS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
