"""CUDA graphs in nsys exports are counted, never dropped.

No public nsys export with graph traces was found (and nsys cannot trace kernels on the GPU machine), so
the fixtures are made at test time from a real export (nsys 2026.3, schema 3.27): the kernels that the
"forward pass" range launched are turned into what nsys writes for a torch.compile run with CUDA graphs.

- graph level (nsys's default ``--cuda-graph-trace=graph``): each run of kernels becomes one row of
  CUPTI_ACTIVITY_KIND_GRAPH_TRACE (the table as NVIDIA's schema reference gives it) spanning them, launched
  by one cudaGraphLaunch call (its first kernel's launch call, renamed; the others removed), its kernels gone;
- node level (``--cuda-graph-trace=node``): the kernels stay, carry graphNodeId and graphId (schema 3.27;
  graphNodeId alone before) and the correlation id of their run's cudaGraphLaunch call.

Expected figures come from the original export's analysis (checked against nsys stats elsewhere) and from
plain SQL sums over the fixture, never from the reader under test.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from profiler_kit.analyze import trace_cache
from profiler_kit.analyze.breakdown import analyze_trace
from profiler_kit.analyze.nsys_schema import Catalog
from profiler_kit.analyze.nsys_sqlite import read_nsys_sqlite
from profiler_kit.analyze.sources import Source, read_trace
from profiler_kit.analyze.tables import SCHEMAS

from tests.conftest import ROOT, SHARED_DATA, shared_params
from tests.test_early_read import COMPARE, _python, _tables

SOURCE = SHARED_DATA / "nsys_sqlite" / "bolongcheng__assignment2-systems__small_opt_A100.sqlite"
pytestmark = pytest.mark.skipif(not SOURCE.exists(), reason=f"{SOURCE} absent")

GRAPH_TRACE_DDL = """
CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    graphId                     INTEGER   NOT NULL,                    -- REFERENCES CUDA_GRAPH_EVENTS(graphId)
    graphExecId                 INTEGER   NOT NULL                     -- REFERENCES CUDA_GRAPH_EVENTS(graphExecId)
)"""
LAUNCHES = 10
GRAPH_IDS = (3, 7)  # launch i replays graph GRAPH_IDS[i % 2]
GRAPH_EXEC = {3: 4, 7: 8}
PHASE = "forward pass"
ENCLOSING = ("profile", PHASE)  # ranges that enclose every launch call of the forward pass
UNTOUCHED = ("backward pass", "optimizer step")
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")


def _copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copy(SOURCE, dst)
    dst.chmod(0o644)
    return dst


def _runs(con: sqlite3.Connection) -> list[list[tuple[int, int, int]]]:
    """The (kernel rowid, correlation id, runtime rowid) of each kernel the forward pass launched, in launch
    order, in LAUNCHES runs."""
    start, end, gtid = con.execute(
        "SELECT start, end, globalTid FROM NVTX_EVENTS WHERE text = ? AND eventType = 59", (PHASE,)
    ).fetchone()
    rows = con.execute(
        """SELECT k.rowid, k.correlationId, r.rowid FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
           JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r ON r.correlationId = k.correlationId
           WHERE r.globalTid = ? AND r.start >= ? AND r.end <= ? ORDER BY r.start""",
        (gtid, start, end),
    ).fetchall()
    return [list(map(tuple, run)) for run in np.array_split(np.array(rows), LAUNCHES)]


def _graph_launch_name(con: sqlite3.Connection) -> int:
    (top,) = con.execute("SELECT max(id) FROM StringIds").fetchone()
    con.execute("INSERT INTO StringIds VALUES (?, 'cudaGraphLaunch_v10000')", (top + 1,))
    return top + 1


def _one_launch_call(con: sqlite3.Connection, run: list[tuple[int, int, int]], name_id: int) -> int:
    """The run's first launch call becomes its cudaGraphLaunch; the run's other calls go. Its correlation id."""
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = ? WHERE rowid = ?", (name_id, int(run[0][2])))
    con.executemany("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid = ?", [(int(r),) for _, _, r in run[1:]])
    return int(run[0][1])


def graph_level(tmp_path: Path, drop_kernel_table: bool = False) -> tuple[Path, pd.DataFrame]:
    """The fixture at graph level, and its graph launches: start, end, corr, graph, and the kernels they
    replaced (removed, removed_ns)."""
    path = _copy(tmp_path, "graphs.sqlite")
    con = sqlite3.connect(path)
    name_id = _graph_launch_name(con)
    con.execute(GRAPH_TRACE_DDL)
    launches = []
    for i, run in enumerate(_runs(con)):
        rowids = [int(k) for k, _, _ in run]
        marks = ",".join("?" * len(rowids))
        kernels = con.execute(
            "SELECT start, end, deviceId, contextId, streamId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL "
            f"WHERE rowid IN ({marks})",
            rowids,
        ).fetchall()
        start, end = min(k[0] for k in kernels), max(k[1] for k in kernels)
        device, context, stream, gpid = kernels[0][2:]
        corr, graph = _one_launch_call(con, run, name_id), GRAPH_IDS[i % 2]
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, ?, ?, NULL, ?, ?, ?, ?, ?)",
            (start, end, device, context, stream, corr, gpid, graph, GRAPH_EXEC[graph]),
        )
        con.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid IN ({marks})", rowids)
        launches.append((start, end, corr, graph, sum(k[1] - k[0] for k in kernels), len(kernels)))
    if drop_kernel_table:
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    con.close()
    return path, pd.DataFrame(launches, columns=["start", "end", "corr", "graph", "removed_ns", "removed"])


def node_level(tmp_path: Path, graph_id_column: bool = True) -> tuple[Path, dict[int, int]]:
    """The fixture at node level (without the graphId column, as schema 3.16/3.17 write it), and the graph
    each forward kernel (by correlation id in the source) ran in."""
    path = _copy(tmp_path, "nodes.sqlite")
    con = sqlite3.connect(path)
    if not graph_id_column:
        con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN graphId")
    name_id = _graph_launch_name(con)
    graph_of = {}
    for i, run in enumerate(_runs(con)):
        corr, graph = _one_launch_call(con, run, name_id), GRAPH_IDS[i % 2]
        for node, (rowid, old_corr, _) in enumerate(run):
            graph_of[int(old_corr)] = graph
            sets = "correlationId = ?, graphNodeId = ?" + (", graphId = ?" if graph_id_column else "")
            values = (corr, 1000 * (i + 1) + node, *((graph,) if graph_id_column else ()), int(rowid))
            con.execute(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET {sets} WHERE rowid = ?", values)
    con.commit()
    con.close()
    return path, graph_of


def _union_ns(path: Path) -> int:
    """GPU busy time from plain SQL: the union of kernel, graph launch and memcpy/memset intervals, per device."""
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    tables = {t for (t,) in con.execute("SELECT name FROM sqlite_master")}
    rows = []
    for t in (*GPU_TABLES, "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if t in tables:
            rows += con.execute(f"SELECT deviceId, start, end FROM {t}").fetchall()
    con.close()
    total, last = 0, {}
    for device, start, end in sorted(rows):
        done = last.get(device, start)
        total += max(0, end - max(start, done))
        last[device] = max(done, end)
    return total


def _by_name(table: pd.DataFrame, key: str = "range") -> pd.DataFrame:
    return table.set_index(key)


@pytest.fixture(scope="module")
def original():
    return analyze_trace(read_nsys_sqlite(SOURCE, details=False))


def test_graph_launches_are_kernels_rows(tmp_path):
    path, launches = graph_level(tmp_path)
    before = read_nsys_sqlite(SOURCE)
    trace = read_nsys_sqlite(path)
    graphs = trace.kernels[trace.kernels["graph_id"] >= 0]
    assert len(trace.kernels) == len(before.kernels) - launches["removed"].sum() + LAUNCHES
    assert len(graphs) == LAUNCHES
    assert sorted(graphs["start_ns"]) == sorted(launches["start"])
    got = graphs.set_index("correlation_id").loc[launches["corr"]]
    assert list(got["graph_id"]) == list(launches["graph"])
    assert list(got["name"].astype(str)) == [f"[CUDA graph {g}]" for g in launches["graph"]]
    assert (got["demangled_name"].astype(str) == got["name"].astype(str)).all()
    assert (got["duration_ns"].to_numpy() == (launches["end"] - launches["start"]).to_numpy()).all()
    assert (got[["grid_x", "block_z", "registers_per_thread", "shared_memory_bytes"]] == -1).all().all()
    assert (got["stream_id"] == before.kernels["stream_id"].iloc[0]).all()
    assert (trace.kernels["graph_id"] >= -1).all()


def test_graph_launches_count_in_busy_time_ranges_and_phases(tmp_path, original):
    path, launches = graph_level(tmp_path)
    res = analyze_trace(read_nsys_sqlite(path, details=False))
    summary = res["summary"].iloc[0]
    graph_ns = int((launches["end"] - launches["start"]).sum())
    removed_ns = int(launches["removed_ns"].sum())
    old = original["summary"].iloc[0]
    assert summary["gpu_busy_ns"] == _union_ns(path)
    assert summary["kernel_time_ns"] == old["kernel_time_ns"] - removed_ns + graph_ns
    assert summary["kernels"] == old["kernels"] - launches["removed"].sum() + LAUNCHES
    assert summary["launched_ops"] == old["launched_ops"] - launches["removed"].sum() + LAUNCHES  # all launched
    assert (summary["graph_kernels"], summary["graph_launches"], summary["graph_time_ns"]) == (
        LAUNCHES,
        LAUNCHES,
        graph_ns,
    )
    assert summary["graph_time_frac"] == pytest.approx(graph_ns / summary["kernel_time_ns"])
    ranges, before = _by_name(res["ranges"]), _by_name(original["ranges"])
    for name in ENCLOSING:  # every launch call lies inside these: the graphs replace their kernels there
        assert ranges.loc[name, "kernel_time_ns"] == before.loc[name, "kernel_time_ns"] - removed_ns + graph_ns
        assert ranges.loc[name, "kernels"] == before.loc[name, "kernels"] - launches["removed"].sum() + LAUNCHES
    for name in UNTOUCHED:
        assert ranges.loc[name, "kernel_time_ns"] == before.loc[name, "kernel_time_ns"]
    phases, old_phases = _by_name(res["phases"]), _by_name(original["phases"])
    expect = old_phases.loc[PHASE, "kernel_per_instance_ns"] - removed_ns + graph_ns
    assert phases.loc[PHASE, "kernel_per_instance_ns"] == phases.loc[PHASE, "window_kernel_per_instance_ns"] == expect
    kernels = _by_name(res["kernels"], "kernel")
    for graph in GRAPH_IDS:
        mine = launches[launches["graph"] == graph]
        assert kernels.loc[f"[CUDA graph {graph}]", "count"] == len(mine)
        assert kernels.loc[f"[CUDA graph {graph}]", "total_ns"] == int((mine["end"] - mine["start"]).sum())


def test_an_export_with_graph_launches_and_no_kernel_table(tmp_path):
    path, launches = graph_level(tmp_path, drop_kernel_table=True)
    trace = read_nsys_sqlite(path, details=False)
    assert len(trace.kernels) == LAUNCHES and (trace.kernels["graph_id"] >= 0).all()
    summary = analyze_trace(trace)["summary"].iloc[0]
    assert summary["gpu_busy_ns"] == _union_ns(path)
    assert summary["launched_ops"] == LAUNCHES + summary["memops"]


@pytest.mark.parametrize("graph_id_column", [True, False], ids=["graphId", "graphNodeId_only"])
def test_node_level_kernels_count_as_usual_with_their_graph(tmp_path, original, graph_id_column):
    path, graph_of = node_level(tmp_path, graph_id_column)
    before = read_nsys_sqlite(SOURCE, details=False)
    trace = read_nsys_sqlite(path, details=False)
    assert len(trace.kernels) == len(before.kernels)
    in_graph = before.kernels["correlation_id"].isin(list(graph_of)).to_numpy()
    # graph ids as written; 0 where the export names no graph (graphNodeId alone)
    want = before.kernels["correlation_id"].map(graph_of).where(in_graph, -1).astype("int64")
    if not graph_id_column:
        want = want.where(~in_graph, 0)
    assert (trace.kernels["graph_id"].to_numpy() == want.to_numpy()).all()
    res = analyze_trace(trace)
    summary, old = res["summary"].iloc[0], original["summary"].iloc[0]
    graph_ns = int(before.kernels["duration_ns"][in_graph].sum())
    assert summary["gpu_busy_ns"] == old["gpu_busy_ns"] == _union_ns(path)
    assert summary["kernel_time_ns"] == old["kernel_time_ns"]
    assert (summary["graph_kernels"], summary["graph_launches"]) == (in_graph.sum(), 0)
    assert summary["graph_time_ns"] == graph_ns
    assert summary["graph_time_frac"] == pytest.approx(graph_ns / old["kernel_time_ns"])
    ranges, old_ranges = _by_name(res["ranges"]), _by_name(original["ranges"])
    for name in (*ENCLOSING, *UNTOUCHED):  # the graph launch call lies where the kernels' own calls did
        assert (
            ranges.loc[name, ["kernels", "kernel_time_ns"]].tolist()
            == old_ranges.loc[name, ["kernels", "kernel_time_ns"]].tolist()
        )
    pd.testing.assert_frame_equal(res["phases"], original["phases"])


def test_a_launch_also_traced_node_by_node_counts_once(tmp_path):
    """Should an export hold both (a graph launch row and kernels with a graph id from the same call), the
    launch row is left out rather than counting its GPU time twice."""
    path, _ = node_level(tmp_path)
    con = sqlite3.connect(path)
    con.execute(GRAPH_TRACE_DDL)
    con.execute(
        """INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE
           SELECT min(start), max(end), deviceId, contextId, NULL, streamId, correlationId, globalPid, graphId, 1
           FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphId IS NOT NULL GROUP BY correlationId"""
    )
    con.commit()
    con.close()
    nodes = read_nsys_sqlite(path, details=False)
    assert len(nodes.kernels) == len(read_nsys_sqlite(SOURCE, details=False).kernels)
    assert not nodes.kernels["name"].astype(str).str.startswith("[CUDA graph").any()


FIXTURES = {
    "graph": lambda tmp: graph_level(tmp)[0],
    "node": lambda tmp: node_level(tmp)[0],
    "node_old_schema": lambda tmp: node_level(tmp, graph_id_column=False)[0],
    "graph_no_kernel_table": lambda tmp: graph_level(tmp, drop_kernel_table=True)[0],
}


def _assert_same(a, b):
    for name in SCHEMAS:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)


@pytest.mark.parametrize("make", FIXTURES.values(), ids=FIXTURES.keys())
def test_every_read_path_gives_the_same_tables(make, tmp_path, monkeypatch):
    path = make(tmp_path)
    want = read_nsys_sqlite(path, details=False)
    monkeypatch.setattr(
        "profiler_kit.analyze.nsys_schema.page_columns", lambda *args, **kwargs: None
    )  # the ADBC driver
    _assert_same(want, read_nsys_sqlite(path, details=False))
    monkeypatch.setattr("profiler_kit.analyze.nsys_sqlite.adbc_sqlite", lambda: None)  # sqlite3
    monkeypatch.setattr("profiler_kit.analyze.nsys_schema.adbc_sqlite", lambda: None)
    _assert_same(want, read_nsys_sqlite(path, details=False))
    monkeypatch.undo()
    monkeypatch.setattr(trace_cache, "MIN_EXPORT_BYTES", 0)  # the Arrow cache: written, then read
    for _ in range(2):
        writer = trace_cache.CacheWriter()
        cached = read_trace(Source(path, "nsys-sqlite"), details=False, cache=writer)
        writer.finish()
        cached.meta = want.meta
        _assert_same(want, cached)
    assert trace_cache.cache_dir(path).is_dir()
    detailed = read_nsys_sqlite(path).kernels  # the full read: the same rows, names aside
    same = ["start_ns", "end_ns", "device_id", "correlation_id", "graph_id", "pid"]
    pd.testing.assert_frame_equal(detailed[same], want.kernels[same])


@pytest.mark.skipif(sys.platform != "linux", reason="the early read forks on Linux only")
@pytest.mark.parametrize("make", FIXTURES.values(), ids=FIXTURES.keys())
def test_the_early_read_gives_the_same_tables(make, tmp_path):
    path = make(tmp_path)
    out = _python(COMPARE, str(path), "keep")
    assert out.returncode == 0, out.stderr  # the reads with and without the early read gave equal tables
    result = json.loads(out.stdout)
    assert result["fallbacks"] == [] and result["alive"] == []  # the child read every table it was given
    assert "CUPTI_ACTIVITY_KIND_RUNTIME" in result["early"]
    assert ("CUPTI_ACTIVITY_KIND_KERNEL" in result["early"]) == ("CUPTI_ACTIVITY_KIND_KERNEL" in _tables(path))


def test_empty_graph_tables_read_as_before(tmp_path):
    """An export made with --lazy=false has every table, the graph ones empty: it reads as without them."""
    path = _copy(tmp_path, "lazy.sqlite")
    con = sqlite3.connect(path)
    con.execute(GRAPH_TRACE_DDL)
    con.execute("CREATE TABLE CUDA_GRAPH_EVENTS (start INTEGER, end INTEGER, graphId INTEGER)")
    con.commit()
    con.close()
    for details in (True, False):
        _assert_same(read_nsys_sqlite(SOURCE, details=details), _relabelled(read_nsys_sqlite(path, details=details)))


def _relabelled(trace):
    trace.meta["source"] = str(SOURCE)
    return trace


@pytest.mark.parametrize("path", shared_params("nsys_sqlite", "*.sqlite"))
def test_exports_without_graphs_skip_the_graph_column(path):
    """The kernel table's graph column (in every export since 2022.4) is read only where graphs were used."""
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    tables = {
        t: {r[1] for r in con.execute(f'PRAGMA table_info("{t}")')}
        for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    in_graphs = sum(  # kernels that ran in a graph, and graph launches: plain SQL
        con.execute(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {c} > 0").fetchone()[0]
        for c in ("graphId", "graphNodeId")
        if c in tables.get("CUPTI_ACTIVITY_KIND_KERNEL", ())
    ) + (
        con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE").fetchone()[0]
        if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables
        else 0
    )
    con.close()
    if in_graphs:
        pytest.skip("this export used CUDA graphs")
    catalog = Catalog(path)
    try:
        assert catalog.graph_column is None
        if catalog.has("CUPTI_ACTIVITY_KIND_KERNEL"):
            read = catalog.lean_kernel_read()
            assert not {"graphId", "graphNodeId"} & {c for _, cols in read.sources for c in cols}
    finally:
        catalog.close()
    assert (read_nsys_sqlite(path, details=False).kernels["graph_id"] == -1).all()


@pytest.mark.parametrize("make", FIXTURES.values(), ids=FIXTURES.keys())
def test_exports_with_graphs_read_the_graph_column_with_the_kernels(make, tmp_path):
    catalog = Catalog(make(tmp_path))
    try:
        want = (
            None
            if not catalog.has("CUPTI_ACTIVITY_KIND_KERNEL")
            else next(c for c in ("graphId", "graphNodeId") if c in catalog.columns["CUPTI_ACTIVITY_KIND_KERNEL"])
        )
        assert catalog.graph_column == want
        if want:
            assert want in dict(catalog.lean_kernel_read().positions)  # one read of the table, early or not
    finally:
        catalog.close()


def test_report_says_how_much_gpu_time_ran_in_graphs(tmp_path, original):
    path, launches = graph_level(tmp_path)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "profiler_kit", "report", str(path), "-o", str(out), "--no-html"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    text = (out / "report.md").read_text()
    summary = analyze_trace(read_nsys_sqlite(path, details=False))["summary"].iloc[0]
    graph_ms = (launches["end"] - launches["start"]).sum() / 1e6
    assert f"GPU time in CUDA graphs: {graph_ms:.3f} ms, {100 * summary['graph_time_frac']:.1f}% of kernel time" in text
    assert f"{LAUNCHES} graph launches traced whole" in text
    assert f"The GPU was busy {100 * summary['gpu_busy_ns'] / summary['gpu_span_ns']:.1f}%" in text
