"""The committed reports/ is what `simmoe report` produces: its check slice is recomputed here.

`simmoe report` writes ``tables/check-slice.csv``: the table part (Tables
2–4 and Figure 4's rows) on the first few requests of each trace, with the
settings recorded in ``report-args.json``.  Recomputing it from the shipped
traces catches a stale committed report (traces, profiles or simulator
changed since it was generated) at a fraction of the full command's cost.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports"


@pytest.mark.slow
def test_committed_check_slice_is_reproduced():
    from simmoe.report.experiments import ReportSettings, check_rows
    from simmoe.trace.io import read_trace

    args_file = REPORTS / "report-args.json"
    if not args_file.is_file():
        pytest.skip("no committed reports/report-args.json")
    args = json.loads(args_file.read_text())
    settings = ReportSettings.from_dict(args["settings"])
    ref = pd.read_csv(REPORTS / "tables" / "check-slice.csv")
    parts = []
    for t in args["traces"]:
        path = ROOT / t if not Path(t).is_absolute() else Path(t)
        assert path.is_file(), f"the committed report was made from {t}, which is missing"
        parts.append(check_rows(read_trace(path), t, settings))
    got = pd.concat(parts, ignore_index=True)
    pd.testing.assert_frame_equal(got, ref, check_dtype=False, rtol=1e-9)
    index = (REPORTS / "index.md").read_text()
    assert args["command"] in index
    for t in args["traces"]:
        stem = Path(t).stem
        main = pd.read_csv(REPORTS / "tables" / f"{stem}-replays.csv")
        assert (main["requests_limit"].fillna(-1) == (settings.requests or -1)).all()
