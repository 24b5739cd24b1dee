"""analyze_trace's threaded schedule gives exactly what its sequential reference (``threads=1``) gives."""

from __future__ import annotations

import pandas as pd
import pytest
from profiler_kit.analyze.breakdown import TABLES, analyze_trace
from profiler_kit.analyze.sources import discover, read_trace

from tests.conftest import FIXTURES, ROOT, shared_files

TRACES = [
    *shared_files("nsys_sqlite", "*.sqlite"),
    *shared_files("kineto", "*.json.gz"),
    *sorted((FIXTURES / "kineto").glob("*.json*")),
    *sorted((FIXTURES / "nsys_cpu").glob("*.sqlite")),
    *sorted((ROOT / "examples").glob("*/*.json.gz")),
    *sorted((ROOT / "examples").glob("*/*.sqlite")),
]


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name[:60]) for p in TRACES])
def test_threaded_analysis_equals_the_sequential_one(path):
    (source,) = discover([path])
    trace = read_trace(source)
    sequential = analyze_trace(trace, threads=1)
    threaded = analyze_trace(trace)
    assert list(threaded) == list(sequential) == list(TABLES)
    for name in TABLES:
        pd.testing.assert_frame_equal(threaded[name], sequential[name], check_exact=True, obj=name)
