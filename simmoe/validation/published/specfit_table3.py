"""SpecFit Table 3 and Figure 3 (GSM8K, A100, 48 slots): fit set.

The GSM8K preset and the ``a100-pcie-40gb`` profile were fitted to these figures.
"""

from __future__ import annotations

from simmoe.validation.published.rows import Row, table_rows
from simmoe.validation.published.runs import RunResult
from simmoe.validation.published.settings import SLOTS_A100

FIGURE = "specfit.table3_gsm8k_a100"
SECTION = "GSM8K, Table 3 and Figure 3 (A100)"


def rows(pub: dict, res: dict[str, RunResult], t5: dict[str, dict], traces: dict[str, dict]) -> list[Row]:
    """Table 3's counters beside the GSM8K runs (all ``fit``, from published.json)."""
    return table_rows(pub, FIGURE, SECTION, res, "gsm8k", "a100", SLOTS_A100, {})
