"""Small traces for the report tests, written once per module."""

from __future__ import annotations

import pytest
from report_traces import any_model_profiles, small


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


@pytest.fixture(scope="session")
def any_profiles(tmp_path_factory) -> dict[str, str]:
    """The report's base and RTX 4090 profiles stating no geometry: they time the small traces."""
    return any_model_profiles(tmp_path_factory.mktemp("report-profiles"))
