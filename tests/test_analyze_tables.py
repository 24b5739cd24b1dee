"""analyze_trace(tables=...) returns the tables asked for, equal to those of a full analysis; tables that arrive later."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import profiler_kit.analyze.tables as tables
import pytest
from profiler_kit.analyze.breakdown import TABLES, analyze_trace
from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.sources import Source, read_trace
from profiler_kit.analyze.tables import SCHEMAS, Trace

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


def _later(df: pd.DataFrame | Exception, delay: float = 0.2) -> Future:
    """A future that gets ``df`` (or raises the exception) ``delay`` seconds from now, from another thread."""
    future: Future = Future()

    def finish():
        time.sleep(delay)
        if isinstance(df, Exception):
            future.set_exception(df)
        else:
            future.set_result(df)

    threading.Thread(target=finish).start()
    return future


def test_an_arriving_table_is_waited_for_at_first_use_and_validated():
    trace = read_trace(Source(EXAMPLE, "kineto"))
    want = analyze_trace(trace, REPORT_TABLES)
    runtime = trace.runtime
    raw = runtime.assign(name=runtime["name"].astype(object))  # as a reader might hand it: coerced on use
    late = Trace(**{n: getattr(trace, n) for n in SCHEMAS if n != "runtime"}, meta=trace.meta).arriving(
        runtime=_later(raw)
    )
    assert late.pending("runtime")
    got = analyze_trace(late, REPORT_TABLES)  # the runtime is first used on the second thread
    assert late.runtime.dtypes.equals(runtime.dtypes) and not late.pending("runtime")
    for name, table in want.items():
        pd.testing.assert_frame_equal(got[name], table)


def test_two_threads_get_the_same_arriving_table():
    trace = Trace().arriving(runtime=_later(Trace().runtime))
    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda _: trace.runtime, range(2))
    assert first is second is trace.runtime


def test_a_failed_read_raises_where_its_table_is_used():
    trace = Trace().arriving(runtime=_later(InputError("x.sqlite: corrupt or truncated SQLite file")))
    with pytest.raises(InputError, match="corrupt"):
        analyze_trace(trace, REPORT_TABLES)
    with pytest.raises(InputError, match="corrupt"):  # and again at each later use
        _ = trace.runtime
    with pytest.raises(AttributeError):
        _ = trace.no_such_table


@pytest.mark.parametrize("name", [*SCHEMAS, "MEMORY_EVENTS", "MEMORY_SEGMENTS", "MEMORY_BLOCKS", "MEMORY_STACKS"])
def test_an_empty_table_is_what_validate_makes_of_no_rows(name):
    """``empty`` builds its columns directly; they must be the dtypes ``validate`` gives (categories included)."""
    schema = SCHEMAS.get(name) or getattr(tables, name)
    made, validated = tables.empty(schema), tables.validate(pd.DataFrame({c: [] for c in schema}), schema)
    pd.testing.assert_frame_equal(made, validated, check_exact=True)
    for column, dtype in schema.items():
        if dtype == tables.CAT:
            assert made[column].cat.categories.dtype == validated[column].cat.categories.dtype


def test_a_queued_job_is_taken_back_when_not_started_else_waited_for():
    from profiler_kit.analyze.breakdown import taken_back

    release = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as pool:
        busy = pool.submit(release.wait, 10)  # the pool's one thread is busy
        queued = pool.submit(threading.get_ident)
        assert taken_back(queued, threading.get_ident) == threading.get_ident()  # run here
        release.set()
        busy.result()
        started = pool.submit(lambda: (time.sleep(0.2), threading.get_ident())[1])
        time.sleep(0.05)  # it has started on the pool's thread: waited for, not run again
        assert taken_back(started, threading.get_ident) != threading.get_ident()
