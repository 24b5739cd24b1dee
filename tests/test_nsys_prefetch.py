"""Early reads of a big export's tables (``analyze.nsys_prefetch.Prefetch``): taken by the reader, same tables, no new errors."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from profiler_kit.analyze import nsys_schema, trace_cache
from profiler_kit.analyze.errors import InputError
from profiler_kit.analyze.nsys_prefetch import Prefetch
from profiler_kit.analyze.nsys_sqlite import read_nsys_sqlite

from tests.test_nsys_sqlite import BAD_CASES, CPU_FIXTURE, _old_schema_export

pytestmark = pytest.mark.skipif(nsys_schema.adbc_sqlite() is None, reason="prefetch needs the ADBC driver")


def test_prefetched_tables_are_taken_and_equal(tmp_path):
    path = _old_schema_export(tmp_path)
    direct = read_nsys_sqlite(path, details=False)
    prefetched = Prefetch()
    prefetched.start(path)
    assert len(prefetched.started) == 1  # the kernels
    early = read_nsys_sqlite(path, details=False, prefetched=prefetched)
    assert not prefetched.started  # taken: the reader asked for the very same read
    for name in ("kernels", "runtime", "nvtx", "memops"):
        pd.testing.assert_frame_equal(getattr(early, name), getattr(direct, name), check_exact=True)


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_prefetch_leaves_bad_files_to_the_reader(case, tmp_path):
    path = BAD_CASES[case](tmp_path)
    with pytest.raises(InputError) as plain:
        read_nsys_sqlite(path, details=False)
    prefetched = Prefetch()
    prefetched.start(path)  # never raises
    with pytest.raises(InputError) as early:
        read_nsys_sqlite(path, details=False, prefetched=prefetched)
    assert str(early.value) == str(plain.value)


def test_failed_early_read_is_the_readers_error(tmp_path, monkeypatch):
    path = _old_schema_export(tmp_path)
    prefetched = Prefetch()
    prefetched.start(path)
    for future in prefetched.started.values():
        future.result()
    broken = prefetched.pool.submit(lambda: (_ for _ in ()).throw(RuntimeError("disk I/O error")))
    key = next(iter(prefetched.started))
    prefetched.started[key] = broken
    with pytest.raises(InputError, match="corrupt or truncated SQLite file \\(disk I/O error\\)"):
        read_nsys_sqlite(path, details=False, prefetched=prefetched)


def test_prefetch_only_for_big_exports_without_a_cache(tmp_path, monkeypatch):
    path = tmp_path / "run.sqlite"
    shutil.copy(CPU_FIXTURE, path)
    started = []
    prefetched = Prefetch()
    monkeypatch.setattr(prefetched, "start", started.append)
    trace_cache.prefetch_uncached(path, prefetched)  # under MIN_EXPORT_BYTES: read fast enough as it is
    monkeypatch.setattr(trace_cache, "MIN_EXPORT_BYTES", 0)
    trace_cache.prefetch_uncached(tmp_path / "trace.json", prefetched)  # not an nsys export
    trace_cache.prefetch_uncached(tmp_path / "gone.sqlite", prefetched)  # missing: the reader says so
    assert started == []
    trace_cache.prefetch_uncached(path, prefetched)
    trace_cache.cache_dir(path).mkdir()
    trace_cache.prefetch_uncached(path, prefetched)  # the cache will serve the report
    trace_cache.prefetch_uncached(path, prefetched, cache=False)  # --no-cache
    assert started == [path, path]
