"""Early reads of a big export's tables (``nsys_schema.prefetch``): taken by the reader, same tables, no new errors."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from analyze import nsys_schema, trace_cache
from analyze.errors import InputError
from analyze.nsys_sqlite import read_nsys_sqlite
from tests.test_nsys_sqlite import BAD_CASES, CPU_FIXTURE, _old_schema_export

pytestmark = pytest.mark.skipif(nsys_schema.adbc_sqlite() is None, reason="prefetch needs the ADBC driver")


@pytest.fixture(autouse=True)
def empty_registry():
    yield
    nsys_schema._prefetched.clear()


def test_prefetched_tables_are_taken_and_equal(tmp_path):
    path = _old_schema_export(tmp_path)
    direct = read_nsys_sqlite(path, details=False)
    nsys_schema.prefetch(path)
    assert len(nsys_schema._prefetched) == 1  # the kernels
    early = read_nsys_sqlite(path, details=False)
    assert not nsys_schema._prefetched  # taken: the reader asked for the very same read
    for name in ("kernels", "runtime", "nvtx", "memops"):
        pd.testing.assert_frame_equal(getattr(early, name), getattr(direct, name), check_exact=True)


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_prefetch_leaves_bad_files_to_the_reader(case, tmp_path):
    path = BAD_CASES[case](tmp_path)
    with pytest.raises(InputError) as plain:
        read_nsys_sqlite(path, details=False)
    nsys_schema.prefetch(path)  # never raises
    with pytest.raises(InputError) as early:
        read_nsys_sqlite(path, details=False)
    assert str(early.value) == str(plain.value)


def test_failed_early_read_is_the_readers_error(tmp_path, monkeypatch):
    path = _old_schema_export(tmp_path)
    nsys_schema.prefetch(path)
    for future in nsys_schema._prefetched.values():
        future.result()
    broken = nsys_schema._prefetch_pool.submit(lambda: (_ for _ in ()).throw(RuntimeError("disk I/O error")))
    key = next(iter(nsys_schema._prefetched))
    nsys_schema._prefetched[key] = broken
    with pytest.raises(InputError, match="corrupt or truncated SQLite file \\(disk I/O error\\)"):
        read_nsys_sqlite(path, details=False)


def test_prefetch_only_for_big_exports_without_a_cache(tmp_path, monkeypatch):
    path = tmp_path / "run.sqlite"
    shutil.copy(CPU_FIXTURE, path)
    started = []
    monkeypatch.setattr(nsys_schema, "prefetch", started.append)
    trace_cache.prefetch_uncached(path)  # under MIN_EXPORT_BYTES: read fast enough as it is
    monkeypatch.setattr(trace_cache, "MIN_EXPORT_BYTES", 0)
    trace_cache.prefetch_uncached(tmp_path / "trace.json")  # not an nsys export
    trace_cache.prefetch_uncached(tmp_path / "gone.sqlite")  # missing: the reader says so
    assert started == []
    trace_cache.prefetch_uncached(path)
    trace_cache.cache_dir(path).mkdir()
    trace_cache.prefetch_uncached(path)  # the cache will serve the report
    trace_cache.prefetch_uncached(path, cache=False)  # --no-cache
    assert started == [path, path]
