"""An export read a time window at a time (analyze/windows.py) gives the report the in-memory reader gives.

Compared byte for byte: the markdown and CSV of the same report built from both analyses (the windowed one
leaves out the sections that need the whole trace: LEFT_OUT), and through the CLI, where the in-memory
report with those sections cut out must equal the windowed one but for the windowed sentence.
"""

from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from profiler_kit.analyze.nsys_schema import Catalog
from profiler_kit.analyze.sources import Source
from profiler_kit.analyze.sqlite_pages import integer_chunks, read_integer_columns
from profiler_kit.analyze.stats import ValueCounts, group_stats
from profiler_kit.analyze.windowing import LEFT_OUT
from profiler_kit.analyze.windows import analyze_windows, plan_edges

from profiler_kit.build import TraceResult, analyze_source, build_report
from profiler_kit.cli import cli
from profiler_kit.output import render_report_files
from tests.conftest import FIXTURES, ROOT, SHARED_DATA, shared_files

SHARED = shared_files("nsys_sqlite", "*.sqlite")  # ../shared/data, else the subset shipped in tests/data
CPU_FIXTURE = FIXTURES / "nsys_cpu" / "cpu_nvtx.sqlite"
SMALLEST_GPU = "zx3xyy__assignment2-systems__result_2_7B_nvtx.sqlite"


def replicate(src: Path, dst: Path, copies: int) -> None:
    """benchmarks/bench_report.py's replication along time (the benchmark's own code)."""
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "benchmarks" / "bench_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.replicate(src, dst, copies)


def rendered(path: Path, rows: int) -> tuple[dict, dict, int]:
    """The report files (md and csv) from the windowed analysis and from the in-memory one, and the windows."""
    windowed = analyze_windows(path, rows)
    whole = analyze_source(Source(path, "nsys-sqlite"), path.name)
    meta = windowed.meta | {"windows": windowed.windows}
    tables = {name: whole.tables[name] for name in windowed.tables}  # the in-memory ones, less what is left out
    assert {"range_names", "range_groups", "range_group_kernels", "phases", "phase_kernels"} <= set(tables)
    return report_files(path, meta, windowed.tables), report_files(path, meta, tables), windowed.windows


def report_files(path: Path, meta: dict, tables: dict) -> dict:
    """The md and csv report files of one trace's tables."""
    report = build_report([TraceResult(path.name, str(path), meta, tables)])
    return render_report_files(report, "report", "md", html=False) | render_report_files(report, "r", "csv")


def activity_rows(path: Path) -> int:
    """The rows of the export's kernel table, else of its NVTX table (0: neither): what its windows divide."""
    with sqlite3.connect(path) as con:
        tables = {t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        table = next((t for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS") if t in tables), None)
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] if table else 0


@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name[:30])
def test_windowed_report_equals_in_memory_on_shared_exports(path):
    rows = activity_rows(path)
    windowed, whole, windows = rendered(path, max(7, rows // 6))  # about six windows
    assert windows > 1 or not rows
    assert windowed == whole


def test_windowed_report_of_tiny_windows_equals_in_memory():
    windowed, whole, windows = rendered(CPU_FIXTURE, 7)
    assert windows >= 8 and windowed == whole


def test_replicated_export_in_many_windows_equals_in_memory(tmp_path):
    src = SHARED_DATA / "nsys_sqlite" / SMALLEST_GPU
    if not src.exists():
        pytest.skip("shared export absent")
    big = tmp_path / "big.sqlite"
    replicate(src, big, 3)
    windowed, whole, windows = rendered(big, 1000)
    assert windows >= 10 and windowed == whole
    # kernels launched in an earlier window than their own (the carried launch calls), and there are many
    with sqlite3.connect(big) as con:
        pairs = np.array(
            con.execute(
                "SELECT k.start, r.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId"
            ).fetchall()
        )
    cat = Catalog(big)
    edges = plan_edges(cat, 1000)
    cat.close()
    crossing = np.searchsorted(edges, pairs[:, 0], "right") > np.searchsorted(edges, pairs[:, 1], "right")
    assert crossing.sum() >= 10
    with sqlite3.connect(big) as con:  # and NVTX ranges that span window edges (carried from window to window)
        spans = np.array(con.execute("SELECT start, end FROM NVTX_EVENTS WHERE end IS NOT NULL").fetchall())
    assert (np.searchsorted(edges, spans[:, 0], "right") < np.searchsorted(edges, spans[:, 1], "right")).sum() >= 5


def test_cli_window_leaves_out_only_the_named_sections(tmp_path):
    src = SHARED_DATA / "nsys_sqlite" / SMALLEST_GPU
    if not src.exists():
        pytest.skip("shared export absent")
    runner = CliRunner()
    for args, out in ((["--window", "--window-rows", "1000"], "w"), ([], "m")):
        res = runner.invoke(cli, ["report", str(src), "-o", str(tmp_path / out), "--no-cache", "--no-html", *args])
        assert res.exit_code == 0, res.output
    windowed = (tmp_path / "w" / "report.md").read_text().splitlines()
    whole = (tmp_path / "m" / "report.md").read_text().splitlines()
    note = [i for i, line in enumerate(windowed) if line.startswith("Read in ")]
    assert len(note) == 1 and all(name in windowed[note[0]] for name in LEFT_OUT)
    del windowed[note[0] : note[0] + 2]
    assert "\n".join(without_left_out(whole)).rstrip() == "\n".join(windowed).rstrip()
    assert any("kernels by GPU time" in line for line in windowed)  # the tables are there


def without_left_out(lines: list[str]) -> list[str]:
    """Markdown lines without the sections LEFT_OUT names and the findings' lines."""
    out, skipping = [], None
    for line in lines:
        level = len(line) - len(line.lstrip("#")) if line.startswith("#") else None
        if skipping is not None and level is not None and level <= skipping:
            skipping = None
        if level is not None and line.lstrip("#").strip() in LEFT_OUT:
            skipping = level
        if skipping is None and not line.startswith("Finding"):
            out.append(line)
    cleaned = []
    for line in out:  # the blank line each finding left
        if not (line == "" and cleaned and cleaned[-1] == ""):
            cleaned.append(line)
    return cleaned


def test_integer_chunks_give_the_whole_table_piece_by_piece():
    src = SHARED[0] if SHARED else CPU_FIXTURE
    cat = Catalog(src)
    table = next(t for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS") if cat.has(t))
    read = cat.integer_read(table, (("start",), ()))
    cat.close()
    whole = read_integer_columns(Path(read.path), read.root, dict(read.positions), read.ncols)
    chunks = integer_chunks(Path(read.path), read.root, dict(read.positions), read.ncols, 50)
    if whole is None:
        assert chunks is None
        return
    pieces = list(chunks)
    assert len(pieces) > 3
    assert np.array_equal(np.concatenate([p["start"] for p in pieces]), whole["start"])
    rowid = np.concatenate([p["rowid"] for p in pieces])
    assert (np.diff(rowid) > 0).all()


def test_value_counts_merged_equal_group_stats_to_the_bit():
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 6, 30000)
    values = np.where(rng.random(30000) < 0.5, rng.integers(0, 50, 30000), rng.integers(0, 10**12, 30000))
    counts = ValueCounts()
    for part in np.array_split(np.arange(len(codes)), 9):
        counts.add(codes[part], values[part])
    merged, whole = counts.stats(7), group_stats(codes, values, 7)
    for stat in whole:
        assert np.array_equal(merged[stat], whole[stat], equal_nan=True), stat
    for g in range(6):  # the exact-moment std against a plain two-pass one
        x = values[codes == g].astype(float)
        assert whole["std"][g] == pytest.approx(x.std(ddof=1), rel=1e-12)


def test_export_over_a_fifth_of_memory_is_windowed_without_asking(tmp_path, monkeypatch):
    src = SHARED_DATA / "nsys_sqlite" / SMALLEST_GPU
    if not src.exists():
        pytest.skip("shared export absent")
    monkeypatch.setattr("profiler_kit.analyze.windowing.available_memory", lambda: 5 * src.stat().st_size - 1)
    res = CliRunner().invoke(cli, ["report", str(src), "-o", str(tmp_path), "--no-cache", "--no-html"])
    assert res.exit_code == 0, res.output
    assert "Read in 1 time window(s)" in (tmp_path / "report.md").read_text()
    monkeypatch.setattr("profiler_kit.analyze.windowing.available_memory", lambda: 5 * src.stat().st_size + 1)
    res = CliRunner().invoke(cli, ["report", str(src), "-o", str(tmp_path / "whole"), "--no-cache", "--no-html"])
    assert "Read in" not in (tmp_path / "whole" / "report.md").read_text()


def test_an_export_with_cuda_graphs_is_read_whole_and_says_so(tmp_path):
    src = SHARED_DATA / "nsys_sqlite" / SMALLEST_GPU
    if not src.exists():
        pytest.skip("shared export absent")
    graphs = tmp_path / "graphs.sqlite"
    graphs.write_bytes(src.read_bytes())
    with sqlite3.connect(graphs) as con:
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER, end INTEGER, graphId INTEGER)")
    res = CliRunner().invoke(cli, ["report", str(graphs), "-o", str(tmp_path / "out"), "--no-cache", "--window"])
    assert res.exit_code == 0, res.output
    assert "read whole, not in time windows (CUDA graphs are traced in it)" in res.output
    assert "Read in" not in (tmp_path / "out" / "report.md").read_text()


def test_one_progress_bar_over_the_windows_of_each_export(monkeypatch):
    import contextlib

    from profiler_kit import cli as cli_module

    bars = []

    class Bar:
        def __init__(self, length):
            self.length, self.steps = length, []

        def update(self, n):
            self.steps.append(n)

    def progress_bar(length, label, shown=True):
        bars.append(Bar(length))
        return contextlib.nullcontext(bars[-1])

    monkeypatch.setattr(cli_module, "progress_bar", progress_bar)
    progress = cli_module.WindowProgress()
    for windows in (3, 2):  # two exports read in windows, one after the other
        for done in range(1, windows + 1):
            progress(done, windows)
    assert [(b.length, b.steps) for b in bars] == [(3, [1, 1, 1]), (2, [1, 1])]
