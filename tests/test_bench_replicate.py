"""benchmarks/bench_report.py's ``replicate``: the copies of an export the benchmarks time, row for row.

The reference is written out here from the contract: copy k of every activity table follows copy k-1, its rows
in the source's rowid order, start and end shifted by k spans (span: the export's first start to its last end,
plus 1 ms), correlation ids by k times (largest one + 1); other tables untouched.
"""

from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import ROOT, SHARED_DATA

SPEC = importlib.util.spec_from_file_location("bench_report", ROOT / "benchmarks" / "bench_report.py")
bench_report = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench_report)

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"


def tiny_export(path: Path) -> None:
    """Kernels, runtime calls and NVTX rows with rowid gaps, rows stored out of time order and NULL ends."""
    with sqlite3.connect(path) as con:
        con.execute(f"CREATE TABLE {KERNEL} (start INTEGER, end INTEGER, correlationId INTEGER, shortName INTEGER)")
        con.execute(f"CREATE TABLE {RUNTIME} (start INTEGER, end INTEGER, correlationId INTEGER, nameId INTEGER)")
        con.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, text TEXT, correlationId INTEGER)")
        con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
        con.executemany(f"INSERT INTO {KERNEL} (rowid, start, end, correlationId, shortName) VALUES (?, ?, ?, ?, ?)",
                        [(3, 500, 900, 7, 1), (9, 100, 300, 5, 2), (10, 950, 1200, 9, 1)])  # fmt: skip
        con.executemany(f"INSERT INTO {RUNTIME} VALUES (?, ?, ?, ?)", [(90, 120, 5, 3), (480, 510, 7, 3)])
        con.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?)", [(50, 1300, "step", 4), (60, None, "mark", 11)])
        con.execute("INSERT INTO StringIds VALUES (1, 'k')")


def expected(src: Path, copies: int) -> dict[str, list[tuple]]:
    """Each table's rows (rowid first) in rowid order, as the contract says the copy holds them."""
    with sqlite3.connect(src) as con:
        tables = [t for t in bench_report.SHIFTED if con.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()]  # fmt: skip
        source = {t: con.execute(f"SELECT rowid, * FROM {t} ORDER BY rowid").fetchall() for t in tables}
        cols = {t: [r[1] for r in con.execute(f"PRAGMA table_info({t})")] for t in tables}
    col = {t: {c: i + 1 for i, c in enumerate(cols[t])} for t in tables}
    starts = [r[col[t]["start"]] for t in tables for r in source[t]]
    ends = [r[col[t]["end"]] if r[col[t]["end"]] is not None else r[col[t]["start"]] for t in tables for r in source[t]]
    span = max(ends) - min(starts) + 1_000_000
    corr = max(r[col[t]["correlationId"]] for t in tables if t != "NVTX_EVENTS" for r in source[t]) + 1
    out = {}
    for t in tables:
        rows, next_rowid = list(source[t]), source[t][-1][0] + 1
        for k in range(1, copies):
            for r in source[t]:
                new = list(r)
                new[0], next_rowid = next_rowid, next_rowid + 1
                for c, step in (("start", span), ("end", span), ("correlationId", corr)):
                    if c in col[t] and new[col[t][c]] is not None and not (c == "correlationId" and t == "NVTX_EVENTS"):
                        new[col[t][c]] += k * step
                rows.append(tuple(new))
        out[t] = rows
    return out


def check(src: Path, dst: Path, copies: int) -> None:
    counts = bench_report.replicate(src, dst, copies)
    want = expected(src, copies)
    with sqlite3.connect(dst) as con:
        got = {t: con.execute(f"SELECT rowid, * FROM {t} ORDER BY rowid").fetchall() for t in want}
        others = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        untouched = {t: con.execute(f'SELECT * FROM "{t}"').fetchall() for (t,) in others if t not in want}
    with sqlite3.connect(src) as con:
        assert untouched == {t: con.execute(f'SELECT * FROM "{t}"').fetchall() for t in untouched}
    assert counts == {t: len(rows) for t, rows in want.items()}
    for t in want:
        assert got[t] == want[t], t


def test_three_copies_of_a_tiny_export(tmp_path):
    src = tmp_path / "src.sqlite"
    tiny_export(src)
    check(src, tmp_path / "big.sqlite", 3)
    with sqlite3.connect(tmp_path / "big.sqlite") as con:  # the span: 50 .. 1300 plus 1 ms; NVTX ids kept
        assert con.execute("SELECT start, correlationId FROM NVTX_EVENTS WHERE rowid = 6").fetchone() == (
            60 + 2 * 1_001_250,
            11,
        )


def test_three_copies_of_a_shared_export(tmp_path):
    src = SHARED_DATA / "nsys_sqlite" / "zx3xyy__assignment2-systems__result_2_7B_nvtx.sqlite"
    if not src.exists():
        pytest.skip("shared export absent")
    check(src, tmp_path / "big.sqlite", 3)
