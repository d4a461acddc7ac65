"""Small traces for the report tests, written once per module."""

from __future__ import annotations

import pytest
from report_traces import small


@pytest.fixture(scope="session")
def trace_files(tmp_path_factory):
    """Two small synthetic traces on disk, named like the shipped ones (gsm8k, cnndm)."""
    from simmoe.trace.io import write_trace

    d = tmp_path_factory.mktemp("report-traces")
    paths = {}
    for seed, ds in ((51, "gsm8k"), (52, "cnndm")):
        path = d / f"{ds}.parquet"
        write_trace(small(seed, ds), path)
        paths[ds] = str(path)
    return paths
