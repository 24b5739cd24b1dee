"""The windows of one export as independent tasks (analyze/window_tasks.py): the same report, byte for byte, as
the single-process windowed reader and the in-memory one; in this process, on a local cluster and on a real
`dask scheduler` with two `dask worker` processes; a window that fails fails its export, named; a worker killed
mid-run still gives the complete report."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from profiler_kit.analyze.nsys_schema import Catalog
from profiler_kit.analyze.sources import Source
from profiler_kit.analyze.window_tasks import analyze_window_tasks
from profiler_kit.analyze.windows import analyze_windows, plan_edges

from profiler_kit.build import analyze_source
from tests.conftest import FIXTURES, ROOT, shared_files
from tests.test_parallel import Cluster, invoke, run_killing_a_worker
from tests.test_windows import SMALLEST_GPU, activity_rows, replicate, report_files

SHARED = shared_files("nsys_sqlite", "*.sqlite")  # ../shared/data, else the subset shipped in tests/data
CPU_FIXTURE = FIXTURES / "nsys_cpu" / "cpu_nvtx.sqlite"
KINETO = ROOT / "examples" / "kineto" / "small_ctx512_train_bf16.json.gz"


def in_order(fn, jobs, on_done):
    """The tasks one after another in this process, the last first: no result may lean on an earlier window's."""
    out = [fn(job) for job in reversed(jobs)]
    for job in jobs:
        on_done(job)
    return out[::-1]


def three_ways(path: Path, rows: int) -> tuple[dict, dict, dict, int]:
    """The report files of the window tasks, of the single-process windowed reader and of the in-memory reader
    (its tables less those a windowed report leaves out), and the number of windows."""
    done = []
    tasks = analyze_window_tasks(path, in_order, rows, on_window=lambda d, n: done.append((d, n)))
    assert done == [(k + 1, tasks.windows) for k in range(tasks.windows)]  # the bar, one step a window
    chained = analyze_windows(path, rows)
    whole = analyze_source(Source(path, "nsys-sqlite"), path.name)
    meta = tasks.meta | {"windows": tasks.windows}
    memory = {name: whole.tables[name] for name in chained.tables}
    return (
        report_files(path, meta, tasks.tables),
        report_files(path, meta, chained.tables),
        report_files(path, meta, memory),
        tasks.windows,
    )


@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name[:30])
def test_window_tasks_equal_windows_in_turn_and_in_memory_on_shared_exports(path):
    rows = activity_rows(path)
    tasks, chained, memory, windows = three_ways(path, max(7, rows // 6))
    assert windows > 1 or not rows
    assert tasks == chained == memory


def test_window_tasks_of_tiny_windows_equal_in_memory():
    tasks, chained, memory, windows = three_ways(CPU_FIXTURE, 7)
    assert windows >= 8 and tasks == chained == memory


@pytest.fixture(scope="module")
def replica(tmp_path_factory) -> Path:
    """A shared export three times along time: kernels launched a window before their own, ranges over edges."""
    src = shared_files("nsys_sqlite", SMALLEST_GPU)
    if not src:
        pytest.skip("shared export absent")
    big = tmp_path_factory.mktemp("replica") / "big.sqlite"
    replicate(src[0], big, 3)
    return big


def test_window_tasks_of_a_replica_carry_calls_and_ranges_and_equal_in_memory(replica, tmp_path):
    from profiler_kit.analyze.window_tasks import carries
    from profiler_kit.analyze.windows import Export, split

    tasks, chained, memory, windows = three_ways(replica, 1000)
    assert windows >= 10 and tasks == chained == memory
    exp = Export(replica)  # what the windows passed on: calls and ranges into many windows
    try:
        info = split(exp, tmp_path, 1000, {}, [], reach=True)
    finally:
        exp.close()
    carry = carries(info, tmp_path)
    assert sum(map(bool, carry.calls_into)) >= 2 and sum(map(bool, carry.ranges_into)) >= 10
    with sqlite3.connect(replica) as con:  # and the export itself has them (independent of the code above)
        pairs = np.array(
            con.execute(
                "SELECT k.start, r.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId"
            ).fetchall()
        )
        spans = np.array(con.execute("SELECT start, end FROM NVTX_EVENTS WHERE end IS NOT NULL").fetchall())
    cat = Catalog(replica)
    edges = plan_edges(cat, 1000)
    cat.close()
    assert (np.searchsorted(edges, pairs[:, 0], "right") > np.searchsorted(edges, pairs[:, 1], "right")).sum() >= 10
    assert (np.searchsorted(edges, spans[:, 0], "right") < np.searchsorted(edges, spans[:, 1], "right")).sum() >= 5


def windowed_inputs(replica: Path) -> list[Path]:
    """The replica and the shared exports (or the shipped ones), each read in windows."""
    return [replica, *SHARED]


WINDOW = ("--window", "--window-rows", "1000", "--no-cache", "--no-progress")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["md", "csv"])
def test_windows_on_a_local_cluster_and_on_a_scheduler_give_the_same_bytes(tmp_path, replica, fmt):
    windowed = windowed_inputs(replica)
    broken = tmp_path / "broken.sqlite"  # skipped, and a Kineto trace read whole, beside the windowed exports
    broken.write_bytes(b"not a database " * 100)
    inputs = [*windowed, KINETO, broken]
    cluster = Cluster(tmp_path)
    try:
        runs = {
            "in turn": invoke("report", inputs, tmp_path / "one", "--workers", 1, "--format", fmt, *WINDOW),
            "local cluster": invoke("report", inputs, tmp_path / "two", "--workers", 2, "--format", fmt, *WINDOW),
            "dask scheduler": invoke(
                "report", inputs, tmp_path / "sched", "--scheduler", cluster.address, "--format", fmt, *WINDOW
            ),
        }
        finished = cluster.client.run_on_scheduler(
            lambda dask_scheduler: sum(p.state_counts["memory"] for p in dask_scheduler.task_prefixes.values())
        )
    finally:
        cluster.close()
    ref_code, ref_err, ref_files = runs["in turn"]
    assert ref_code == 1, ref_err
    skipped = [line for line in ref_err.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 1 and str(broken) in skipped[0]
    text = b"".join(ref_files.values())
    assert text.count(b"time window(s)") == len(windowed) or fmt == "csv"
    assert KINETO.name.split(".")[0].encode() in text
    for mode, (code, err, out) in runs.items():
        assert code == 1 and "Traceback" not in err, (mode, err)
        assert [line for line in err.splitlines() if line.startswith("skipped")] == skipped, mode
        assert out == ref_files, mode
    assert finished >= 10 + len(inputs), finished  # the scheduler ran the windows, not one task an export


@pytest.mark.slow
def test_a_failing_window_skips_its_export_with_one_line(tmp_path, replica, monkeypatch):
    import profiler_kit.analyze.window_tasks as window_tasks

    make_jobs = window_tasks.jobs

    def truncated(path, folder, info, carry):  # the replica's kernel spill cut short: its later windows fail
        out = make_jobs(path, folder, info, carry)
        if Path(path) == replica:
            spill = info.spills["CUPTI_ACTIVITY_KIND_KERNEL"]
            with open(spill.path, "r+b") as fh:
                fh.truncate(spill.size // 2)
        return out

    monkeypatch.setattr(window_tasks, "jobs", truncated)
    other = SHARED[0] if SHARED else CPU_FIXTURE
    code, err, out = invoke("report", [replica, other], tmp_path / "out", "--workers", 2, *WINDOW)
    assert code == 1, err
    skipped = [line for line in err.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 1 and str(replica) in skipped[0] and "time window" in skipped[0], err
    assert "its task failed" in skipped[0] and "Traceback" not in err
    assert b"big.sqlite" in out["report.md"] and other.name.encode() in out["report.md"]  # listed; the other reported


@pytest.mark.slow
def test_a_killed_worker_still_gives_the_complete_windowed_report(tmp_path, replica):
    args = ["report", replica, "--format", "csv", "--window", "--window-rows", "300", "--no-cache"]
    ref_code, ref_err, ref_files = invoke("report", args[1:], tmp_path / "ref", "--workers", 1)
    assert ref_code == 0, ref_err
    cluster = Cluster(tmp_path)
    try:
        _, code, err = run_killing_a_worker(cluster, [*args, "-o", tmp_path / "out"])
    finally:
        cluster.close()
    assert code == 0, err
    assert "skipped" not in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in sorted((tmp_path / "out").iterdir())} == ref_files


def test_a_worker_without_the_spill_folder_says_what_to_do(tmp_path):
    from profiler_kit.analyze.errors import InputError

    def elsewhere(fn, jobs, on_done):  # a worker on another machine: the client's spill folder is not there
        for job in jobs:
            job.folder = str(tmp_path / "not-shared")
        return [fn(job) for job in jobs]

    with pytest.raises(InputError, match="does not see the spill folder .*--tmp"):
        analyze_window_tasks(CPU_FIXTURE, elsewhere, 7)
