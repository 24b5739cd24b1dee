"""The Arrow copy of an export's tables: same tables back, rebuilt when the file changes, never half-written."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from profiler_kit.analyze import trace_cache
from profiler_kit.analyze.nsys_sqlite import read_nsys_sqlite
from profiler_kit.analyze.sources import Source, read_trace
from profiler_kit.analyze.tables import SCHEMAS

FIXTURE = Path(__file__).parent / "data" / "nsys_cpu" / "cpu_nvtx.sqlite"


@pytest.fixture
def export(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_cache, "MIN_EXPORT_BYTES", 0)
    path = tmp_path / "run.sqlite"
    shutil.copy(FIXTURE, path)
    return path


def read(path: Path):
    trace = read_trace(Source(path, "nsys-sqlite"), details=False, cache=(writer := trace_cache.CacheWriter()))
    writer.finish()
    return trace


def assert_same(a, b):
    for name in SCHEMAS:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert a.meta == b.meta


def test_cached_read_gives_the_same_tables(export):
    direct = read_nsys_sqlite(export, details=False)
    first = read(export)
    assert trace_cache.cache_dir(export).is_dir()
    assert_same(direct, first)
    assert_same(direct, read(export))
    assert not [p for p in export.parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_columns_of_one_value_live_in_the_manifest(export):
    import json

    import pyarrow as pa

    direct = read_nsys_sqlite(export, details=False)
    read(export)  # writes the cache
    cached = read(export)  # reads it back
    folder = trace_cache.cache_dir(export)
    constant = json.loads((folder / "manifest.json").read_text())["constant"]
    stored = pa.ipc.open_file(pa.memory_map(str(folder / "nvtx.arrow"))).schema.names
    assert constant["nvtx"]["depth"] == -1 and "depth" not in stored  # not computed without details: all -1
    for column, value in constant["nvtx"].items():
        assert (direct.nvtx[column] == value).all()
        assert cached.nvtx[column].to_numpy().strides == (0,)  # back as a view of the value
    assert_same(direct, cached)


def test_changed_export_is_read_again(export, monkeypatch):
    read(export)
    os.utime(export, ns=(1, 1))
    calls = []
    real = trace_cache._load
    monkeypatch.setattr(trace_cache, "_load", lambda *a: calls.append(real(*a)) or calls[-1])
    read(export)
    assert calls == [None]  # stale key: not served


def test_broken_cache_is_ignored(export):
    direct = read_nsys_sqlite(export, details=False)
    read(export)
    (trace_cache.cache_dir(export) / "kernels.arrow").write_bytes(b"not arrow")
    assert_same(direct, read(export))


def test_read_only_folder_gets_no_cache(export):
    folder = export.parent
    folder.chmod(0o555)
    try:
        read(export)
        assert not trace_cache.cache_dir(export).exists()
    finally:
        folder.chmod(0o755)


def test_no_cache_flag(export, tmp_path):
    from click.testing import CliRunner

    from profiler_kit.cli import cli

    res = CliRunner().invoke(cli, ["report", str(export), "-o", str(tmp_path / "out"), "--no-cache"])
    assert res.exit_code == 0, res.output
    assert not trace_cache.cache_dir(export).exists()


def test_report_says_where_it_cached(export, tmp_path):
    from click.testing import CliRunner

    from profiler_kit.cli import cli

    res = CliRunner().invoke(cli, ["report", str(export), "-o", str(tmp_path / "out"), "--no-html"])
    assert res.exit_code == 0, res.output
    assert f"cached tables for the next report in {trace_cache.cache_dir(export)}" in res.output
    res = CliRunner().invoke(cli, ["report", str(export), "-o", str(tmp_path / "out"), "--no-html"])
    assert "cached tables" not in res.output  # served from the cache: nothing new written


def test_each_writer_reports_its_own_writes(export):
    """No module state: a writer's ``finish`` names the folders its reads wrote, and only those."""
    first, second = trace_cache.CacheWriter(), trace_cache.CacheWriter()
    read_trace(Source(export, "nsys-sqlite"), details=False, cache=first)
    assert second.finish() == []
    assert first.finish() == [trace_cache.cache_dir(export)]
    assert first.finish() == []  # said once
    read_trace(Source(export, "nsys-sqlite"), details=False, cache=second)  # served from the cache
    assert second.finish() == []
