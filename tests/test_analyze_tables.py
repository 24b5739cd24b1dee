"""analyze_trace(tables=...) returns the tables asked for, equal to those of a full analysis."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analyze.breakdown import TABLES, analyze_trace
from analyze.sources import Source, read_trace
from profiler_kit.build import REPORT_TABLES

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "kineto" / "small_ctx512_train_bf16.json.gz"


def test_a_subset_of_tables_equals_the_full_analysis():
    trace = read_trace(Source(EXAMPLE, "kineto"))
    full = analyze_trace(trace)
    assert list(full) == list(TABLES)
    subset = analyze_trace(trace, REPORT_TABLES)
    assert list(subset) == [name for name in TABLES if name in REPORT_TABLES]  # in TABLES' order
    assert "range_kernels" not in subset and len(full["attributed"]) > 0
    for name, table in subset.items():
        pd.testing.assert_frame_equal(table, full[name])
