"""The early read (``analyze.early_read``): a forked process reads the kernel, NVTX and runtime tables from the pages.

Each check runs in a fresh interpreter, as the CLI does: the early read starts only before pandas is
imported and without other threads. The tables must equal the normal read's, any failure must fall back
to it (or to its error), and nothing may be left behind: no files, no process, no output from the child.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from profiler_kit.analyze import early_read

from tests.conftest import ROOT, shared_params
from tests.test_nsys_sqlite import CPU_FIXTURE

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the early read forks on Linux only")


def _tables(path: Path) -> set[str]:
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        con.close()


SHARED = shared_params("nsys_sqlite", "*.sqlite")
NO_SHARED = [pytest.param(None, marks=pytest.mark.skip(reason="no real export with kernels"))]
WITH_KERNELS = [p for p in SHARED if p.values[0] and "CUPTI_ACTIVITY_KIND_KERNEL" in _tables(p.values[0])]

# Prefetch as the report does (before pandas), optionally kill the child, then compare with a plain read.
COMPARE = """
import json, os, signal, sys
from pathlib import Path
from profiler_kit.analyze import early_read
from profiler_kit.analyze import early_memory
from profiler_kit.analyze.nsys_prefetch import Prefetch
path, kill, ahead = Path(sys.argv[1]), sys.argv[2] == "kill", sys.argv[3] if len(sys.argv) > 3 else "none"
if ahead == "part":  # a first page allocated ahead, the rest as the child needs it
    early_memory.STEP = 1 << 16
pages = None if ahead == "none" else early_memory.PagesAhead(1 if ahead == "part" else 64 << 20)
prefetched = Prefetch(pages)
prefetched.start(path)
early = {r.table: h for r, h in prefetched.started.items() if isinstance(h, early_read.EarlyRead)}
children = {h.child for h in early.values()}
fallbacks = []
def counted(read, fetch=early_read.fetch_integers):
    fallbacks.append(read.table)
    return fetch(read)
early_read.fetch_integers = counted
if kill:  # at once: the child has not delivered yet
    for child in children:
        os.kill(child.pid, signal.SIGKILL)
import pandas as pd
from profiler_kit.analyze.nsys_sqlite import read_nsys_sqlite
got = read_nsys_sqlite(path, details=False, prefetched=prefetched)
assert not prefetched.started, "the reader took every early read"
want = read_nsys_sqlite(path, details=False)
for name in ("kernels", "runtime", "nvtx", "memops", "gpus", "threads"):
    pd.testing.assert_frame_equal(getattr(got, name), getattr(want, name), check_exact=True)
pids = [child.pid for child in children]
for child in children:
    child.stop()
alive = [p for p in pids if os.path.exists(f"/proc/{p}")]
print(json.dumps({"early": sorted(early), "fallbacks": sorted(fallbacks), "alive": alive}))
"""

# The report command in-process with the early read for exports of any size (the CLI starts it from 32 MiB).
REPORT = """
import sys
from profiler_kit.analyze import trace_cache
trace_cache.MIN_EXPORT_BYTES = 0
from profiler_kit.cli import cli
cli(sys.argv[1:], prog_name="profiler-kit")
"""


def _python(script: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


NSYS_SHM = ("NSys-", "sem.nsys_sem_", "quadd-agent-")  # an nsys run elsewhere on the machine leaves these


def _shm() -> set[str]:
    """Named shared memory, less what nsys processes running beside the test create."""
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return {n for n in names if not n.startswith(NSYS_SHM)}


@pytest.mark.parametrize("ahead", ["none", "part", "more"])
@pytest.mark.parametrize("path", [pytest.param(CPU_FIXTURE, id="cpu_nvtx"), *SHARED])
def test_early_read_gives_the_tables_of_the_normal_read(path, ahead):
    """Also when the memory file's first pages, or more than it needs, were allocated ahead (analyze.early_memory)."""
    before = _shm()
    out = _python(COMPARE, str(path), "keep", ahead)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    expected = sorted({"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"} & _tables(path))
    assert result["early"] == expected  # every activity table of these exports is the plain case
    assert result["fallbacks"] == []  # the child read them all
    assert result["alive"] == []
    assert not _shm() - before  # nothing left behind (what other processes remove meanwhile does not count)


@pytest.mark.parametrize("path", WITH_KERNELS[:2] or NO_SHARED)
def test_a_killed_child_leaves_the_read_to_the_reader(path):
    out = _python(COMPARE, str(path), "kill")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["fallbacks"] == result["early"] != []
    assert result["alive"] == []


def _damaged(src: Path, dst: Path, table: str = "CUPTI_ACTIVITY_KIND_KERNEL") -> Path:
    """``src`` with garbage over the root page of ``table``, size unchanged (the file still opens)."""
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    con.close()
    rng = random.Random(7)
    with open(dst, "r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(bytes(rng.getrandbits(8) for _ in range(page_size)))
    return dst


def _text_in_kernels(src: Path, dst: Path) -> Path:
    """``src`` with text in one kernel's correlationId: not the plain case, which the child leaves to the reader."""
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = 'x' WHERE rowid = 7")
    con.commit()
    con.close()
    return dst


def _damaged_runtime(src: Path, dst: Path) -> Path:
    """The runtime table's root page spoilt: the report has begun on the kernels when its read fails."""
    return _damaged(src, dst, "CUPTI_ACTIVITY_KIND_RUNTIME")


@pytest.mark.parametrize("path", WITH_KERNELS[-1:] or NO_SHARED)
@pytest.mark.parametrize("spoil", [_damaged, _damaged_runtime, _text_in_kernels])
def test_bad_export_is_the_readers_one_error_line(path, spoil, tmp_path):
    bad = spoil(path, tmp_path / "bad.sqlite")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    plain = subprocess.run(  # under 32 MiB: no early read
        [sys.executable, "-m", "profiler_kit", "report", str(bad), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    before = _shm()
    early = _python(REPORT, "report", str(bad), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert early.returncode == plain.returncode == 2
    assert early.stdout == ""
    assert early.stderr == plain.stderr
    assert early.stderr.startswith("Error: ") and early.stderr.count("\n") == 1, early.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.sqlite"]  # no output, no cache folder
    assert not _shm() - before  # nothing left behind (what other processes remove meanwhile does not count)


@pytest.mark.parametrize("path", WITH_KERNELS[-1:] or NO_SHARED)
@pytest.mark.parametrize("fmt", ["md", "csv"])
def test_report_files_are_the_same_with_and_without_the_early_read(path, fmt, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    plain = subprocess.run(
        [sys.executable, "-m", "profiler_kit", "report", str(path), "-o", str(tmp_path / "plain"), "--no-cache"]
        + ["--format", fmt],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert plain.returncode == 0, plain.stderr
    early = _python(REPORT, "report", str(path), "-o", str(tmp_path / "early"), "--no-cache", "--format", fmt)
    assert early.returncode == 0, early.stderr
    assert early.stdout == "" and all(line.startswith("wrote ") for line in early.stderr.splitlines())
    names = sorted(p.name for p in (tmp_path / "plain").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "early").iterdir())
    for name in names:
        assert (tmp_path / "plain" / name).read_bytes() == (tmp_path / "early" / name).read_bytes(), name


def test_nothing_starts_where_a_fork_is_not_safe(monkeypatch):
    read = object()  # never read: start returns first
    monkeypatch.setattr(sys, "platform", "darwin")
    assert early_read.start([read]) == {}
    monkeypatch.setattr(sys, "platform", "linux")
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert early_read.start([read]) == {}
    finally:
        stop.set()
        other.join()
    assert early_read.start([]) == {}


def test_a_table_that_has_come_is_not_held_up_by_a_wait_for_a_later_one():
    """The reader asks for the runtime table on one thread and for the NVTX table on another: the NVTX
    table, delivered first, must come back at once, not when the runtime table does."""
    pipe, to_parent = os.pipe()
    memfd = os.memfd_create("test-early-read")
    reads = ["kernels", "nvtx", "runtime"]  # Child only looks a read up in this list
    child = early_read.Child(0, pipe, memfd, reads)  # pid 0: no process to stop
    later: dict[str, tuple] = {}
    waiter = threading.Thread(target=lambda: later.update(runtime=child.columns("runtime")))
    waiter.start()
    try:
        os.write(to_parent, b"[0, null]\n[1, null]\n")  # the kernel and NVTX tables, declined
        answered = threading.Event()
        asker = threading.Thread(target=lambda: (later.update(nvtx=child.columns("nvtx")), answered.set()))
        asker.start()
        assert answered.wait(10), "the NVTX table waited for the runtime table"
        assert later["nvtx"] == (True, None) and waiter.is_alive()
        os.write(to_parent, b"[2, null]\n")
        waiter.join(10)
        assert later["runtime"] == (True, None)
        assert child.columns("kernels") == (True, None)
    finally:
        os.close(to_parent)
        waiter.join(10)
        child.stop()
