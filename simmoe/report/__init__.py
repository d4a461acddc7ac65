"""`simmoe report`: the SpecFit paper's tables and figures, and what-if plots, for any traces.

Modules: :mod:`~simmoe.report.experiments` (the replays behind every table
and plot), :mod:`~simmoe.report.whatif` (link-bandwidth profiles derived
from a base profile), :mod:`~simmoe.report.tables` (markdown with the
published figures beside), :mod:`~simmoe.report.figures` (PNG plots),
:mod:`~simmoe.report.build` (the index and the atomic writes); the papers'
figures come from :mod:`simmoe.published`.  See docs/reports.md.
"""

from simmoe.report.build import build_report
from simmoe.report.experiments import ReportSettings, check_rows, run_experiments, table5_row
from simmoe.report.whatif import bandwidth_profile

__all__ = ["build_report", "ReportSettings", "run_experiments", "table5_row", "check_rows",
           "bandwidth_profile"]
