"""report, diff and ddp-report --workers/--scheduler (profiler_kit/parallel.py): the same bytes in this process, on a
local cluster and on a real `dask scheduler` with two `dask worker` processes; a corrupt input skipped; a worker
killed mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from profiler_kit.cli import cli
from tests.conftest import FIXTURES, ROOT, shared_files

pytest.importorskip("distributed")

INPUTS = [
    FIXTURES / "nsys_cpu" / "cpu_nvtx.sqlite",
    ROOT / "examples" / "kineto" / "small_ctx512_train_bf16.json.gz",
    *shared_files("nsys_sqlite", "amir-ghz__DynamicViT*.sqlite")[:1],
    *shared_files("kineto", "AMD-AGI__TraceLens*.json.gz")[:1],
]
WAIT_S = 60  # bound on every wait for the cluster the tests start


def batch(root: Path, copies: int = 1, corrupt: bool = True) -> Path:
    """``copies`` of each input under distinct names, plus (``corrupt``) an export that is not SQLite."""
    folder = root / "in"
    folder.mkdir(parents=True)
    for k in range(copies):
        for i, src in enumerate(INPUTS):
            name = src.name.split(".")[0][:24]
            (folder / f"{k:02d}_{i}_{name}{''.join(src.suffixes)}").write_bytes(src.read_bytes())
    if corrupt:
        (folder / "01_broken.sqlite").write_bytes(b"not a database " * 100)
    return folder


DDP_RANKS = sorted((ROOT / "reports" / "ddp" / "trace_xl").glob("bucketed25mb_rank*.json.gz"))
DDP_EXPORT = shared_files("nsys_sqlite", "lizhieffe__*ddp53_profile.sqlite")[:1]  # one export of 2 ranks


def ddp_folder(root: Path, labels: int = 2, corrupt: bool = True) -> Path:
    """Per-rank Kineto traces of ``labels`` variants (a copy of the 2-rank DDP run each; the second in a
    subfolder), a multi-rank nsys export, the DDP timings, and (``corrupt``) a rank trace that is not gzip."""
    folder = root / "ddp"
    for k in range(labels):
        sub = folder / ("" if k == 0 else f"run{k}")
        sub.mkdir(parents=True, exist_ok=True)
        for src in DDP_RANKS:
            (sub / src.name.replace("bucketed25mb", f"v{k}")).write_bytes(src.read_bytes())
    for src in DDP_EXPORT:
        (folder / src.name).write_bytes(src.read_bytes())
    (folder / "ddp_xl.jsonl").write_bytes((ROOT / "reports" / "ddp" / "ddp_xl.jsonl").read_bytes())
    if corrupt:
        (folder / "broken_rank0.json.gz").write_bytes(b"not gzip " * 100)
    return folder


def diff_sides(root: Path, corrupt: bool = True) -> tuple[Path, Path]:
    """BASE: the batch's inputs (and a corrupt export); NEW: two copies of each, Kineto traces compared per op."""
    base = batch(root / "base", corrupt=corrupt)
    new = batch(root / "new", copies=2, corrupt=False)
    return base, new


def invoke(command: str, args: list, out: Path, *options) -> tuple[int, str, dict[str, bytes]]:
    res = CliRunner().invoke(cli, [command, *map(str, args), "-o", str(out), "--no-html", *map(str, options)])
    files = {p.name: p.read_bytes() for p in sorted(out.iterdir())} if out.is_dir() else {}
    return res.exit_code, res.stderr, files


def report(folder: Path, out: Path, *args) -> tuple[int, str, dict[str, bytes]]:
    return invoke("report", [folder], out, *args)


class Cluster:
    """A `dask scheduler` and ``n`` `dask worker` processes (no nanny: a killed worker stays dead) on 127.0.0.1."""

    def __init__(self, tmp: Path, n: int = 2):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.file = tmp / "scheduler.json"
        run = [sys.executable, "-m"]
        self.scheduler = subprocess.Popen(
            [*run, "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(self.file)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.workers = {}
        try:
            self.address = self._wait_for_file()
            for i in range(n):
                self.workers[f"w{i}"] = subprocess.Popen(
                    [*run, "distributed.cli.dask_worker", self.address, "--host", "127.0.0.1", "--nthreads", "1",
                     "--no-nanny", "--no-dashboard", "--name", f"w{i}"],
                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
            from distributed import Client

            self.client = Client(self.address, timeout=WAIT_S)
            self.client.wait_for_workers(n, timeout=WAIT_S)
        except BaseException:
            self.close()
            raise

    def _wait_for_file(self) -> str:
        import json

        end = time.monotonic() + WAIT_S
        while time.monotonic() < end:
            if self.file.exists():
                try:
                    return json.loads(self.file.read_text())["address"]
                except (ValueError, KeyError):
                    pass  # still being written
            if self.scheduler.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("dask scheduler did not start")

    def close(self):
        if getattr(self, "client", None) is not None:
            self.client.close()
        for proc in [*self.workers.values(), self.scheduler]:
            if proc.poll() is None:
                proc.terminate()
        for proc in [*self.workers.values(), self.scheduler]:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    yield c
    c.close()


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["md", "csv"])
def test_same_bytes_in_process_on_local_cluster_and_on_scheduler(tmp_path, cluster, fmt):
    folder = batch(tmp_path)
    runs = {
        "in process": report(folder, tmp_path / "one", "--workers", 1, "--format", fmt),
        "local cluster": report(folder, tmp_path / "two", "--workers", 2, "--format", fmt),
        "dask scheduler": report(folder, tmp_path / "sched", "--scheduler", cluster.address, "--format", fmt),
    }
    ref_code, ref_err, ref_files = runs["in process"]
    assert ref_code == 1, ref_err  # the corrupt export is skipped, the others reported
    assert f"skipped {folder / '01_broken.sqlite'}" in ref_err and "Traceback" not in ref_err
    assert len(ref_files) == 1 if fmt == "md" else len(ref_files) > 10
    listed = ref_files["report.md"] if fmt == "md" else ref_files["report.skipped_inputs.csv"]
    assert b"01_broken.sqlite" in listed
    for mode, (code, err, files) in runs.items():
        assert code == 1 and "Traceback" not in err, (mode, err)
        assert [ln for ln in err.splitlines() if ln.startswith("skipped")] == [
            ln for ln in ref_err.splitlines() if ln.startswith("skipped")
        ], mode
        assert files == ref_files, mode
    prefixes = cluster.client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.task_prefixes))
    assert any("guarded" in p for p in prefixes), prefixes  # the scheduler ran the report's tasks


@pytest.mark.slow
@pytest.mark.parametrize("command", ["diff", "ddp-report"])
@pytest.mark.parametrize("fmt", ["md", "csv"])
def test_diff_and_ddp_report_same_bytes_everywhere(tmp_path, cluster, command, fmt):
    if command == "diff":
        args, broken, code = diff_sides(tmp_path), "01_broken.sqlite", 0  # diff's exit status is its gate's
    else:
        args, broken, code = [ddp_folder(tmp_path)], "broken_rank0.json.gz", 1
    runs = {
        "in process": invoke(command, args, tmp_path / "one", "--workers", 1, "--format", fmt),
        "local cluster": invoke(command, args, tmp_path / "two", "--workers", 2, "--format", fmt),
        "dask scheduler": invoke(command, args, tmp_path / "sched", "--scheduler", cluster.address, "--format", fmt),
    }
    ref_code, ref_err, ref_files = runs["in process"]
    assert ref_code == code, ref_err
    skipped = [ln for ln in ref_err.splitlines() if ln.startswith("skipped")]
    assert len(skipped) == 1 and broken in skipped[0] and "Traceback" not in ref_err
    listed = ref_files[f"{'diff' if command == 'diff' else 'report'}.{'md' if fmt == 'md' else 'skipped_inputs.csv'}"]
    assert broken.encode() in listed
    if command == "ddp-report":  # every variant and the export (where ../shared/data has it) reported
        assert sum(name.endswith("_ranks.csv") for name in ref_files) == 2 + len(DDP_EXPORT) or fmt == "md"
    for mode, (code_, err, files) in runs.items():
        assert code_ == code and "Traceback" not in err, (mode, err)
        assert [ln for ln in err.splitlines() if ln.startswith("skipped")] == skipped, mode
        assert files == ref_files, mode
    prefixes = cluster.client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.task_prefixes))
    assert any("guarded" in p for p in prefixes), prefixes  # the scheduler ran the command's tasks


def run_killing_a_worker(cluster: Cluster, args: list) -> tuple[str | None, int, str]:
    """``python -m profiler_kit *args --scheduler`` with a busy worker killed: its name, exit code, stderr."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "profiler_kit", *map(str, args), "--no-html", "--scheduler", cluster.address],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        victim = _kill_a_busy_worker(cluster, proc)
        _, err = proc.communicate(timeout=WAIT_S * 3)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert victim is not None, "no task ever ran on a worker"
    assert cluster.workers[victim].wait(timeout=10) == -signal.SIGKILL
    return victim, proc.returncode, err


@pytest.mark.slow
@pytest.mark.parametrize("command", ["diff", "ddp-report"])
def test_killed_worker_diff_and_ddp_report_complete(tmp_path, cluster, command):
    if command == "diff":
        base, new = diff_sides(tmp_path, corrupt=False)
        args = ["diff", base, new, "--format", "csv"]
    else:
        args = ["ddp-report", ddp_folder(tmp_path, labels=4, corrupt=False), "--format", "csv"]
    ref_code, ref_err, ref_files = invoke(args[0], args[1:], tmp_path / "ref", "--workers", 1)
    assert ref_code == 0, ref_err
    _, code, err = run_killing_a_worker(cluster, [*args, "-o", tmp_path / "out"])
    assert code == 0, err
    assert "skipped" not in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in sorted((tmp_path / "out").iterdir())} == ref_files


@pytest.mark.slow
def test_killed_worker_still_gives_the_complete_report(tmp_path, cluster):
    folder = batch(tmp_path, copies=3, corrupt=False)
    ref_code, _, ref_files = report(folder, tmp_path / "ref", "--workers", 1)
    assert ref_code == 0
    _, code, err = run_killing_a_worker(cluster, ["report", folder, "-o", tmp_path / "out"])
    assert code == 0, err
    assert "skipped" not in err and "Traceback" not in err
    out = tmp_path / "out"
    assert {p.name: p.read_bytes() for p in sorted(out.iterdir())} == ref_files


def _kill_a_busy_worker(cluster: Cluster, proc) -> str | None:
    """SIGKILL the first worker seen running one of the report's tasks; its name (None if none was seen)."""
    end = time.monotonic() + WAIT_S
    while time.monotonic() < end and proc.poll() is None:
        busy = cluster.client.processing()
        names = {addr: info["name"] for addr, info in cluster.client.scheduler_info()["workers"].items()}
        for addr, keys in busy.items():
            if keys and addr in names:  # a worker that registered between the two calls: seen next time
                name = names[addr]
                cluster.workers[name].send_signal(signal.SIGKILL)
                return name
        time.sleep(0.02)
    return None


def test_default_workers_start_a_cluster_only_for_several_big_inputs(tmp_path):
    from profiler_kit.parallel import CLUSTER_MIN_BYTES, default_workers

    small = [tmp_path / f"s{i}.sqlite" for i in range(3)]
    big = [tmp_path / f"b{i}.sqlite" for i in range(3)]
    for p in small:
        p.write_bytes(b"x")
    for p in big:
        with p.open("wb") as f:
            f.truncate(CLUSTER_MIN_BYTES // 2)  # sparse: no disk used
    assert default_workers(small, cores=2) == 1  # a cluster's start would cost more than it saves
    assert default_workers(big[:1], cores=8) == 1  # one input: never a cluster
    assert default_workers(big, cores=2) == 2
    assert default_workers(big, cores=8) == 3  # no more workers than inputs
    assert default_workers(big, cores=1) == 1


def test_unreachable_scheduler_is_one_error_line(tmp_path, monkeypatch):
    import socket

    from profiler_kit import parallel

    monkeypatch.setattr(parallel, "SCHEDULER_TIMEOUT_S", 1)
    with socket.socket() as s:  # a free port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, err, files = report(batch(tmp_path), tmp_path / "out", "--scheduler", f"tcp://127.0.0.1:{port}")
    assert code == 2 and files == {}
    assert (
        err.startswith(f"Error: cannot reach the Dask scheduler at tcp://127.0.0.1:{port}")
        and len(err.splitlines()) == 1
    )


def test_page_reader_leaves_a_mapping_still_viewed(tmp_path, monkeypatch):
    """A Dask worker's sampling profiler can hold the reader's frame (and its view of the mapped file) when the
    mapping closes: mmap.close raised BufferError there, and a good export was skipped as corrupt."""
    from profiler_kit.analyze import sqlite_pages

    held = []
    monkeypatch.setattr(sqlite_pages, "_read", lambda buf, *a: held.append(buf) or {"x": buf[:1].astype("i8")})
    path = tmp_path / "f.bin"
    path.write_bytes(b"\0" * 4096)
    assert sqlite_pages.read_integer_columns(path, 1, {"x": 0}, 1)["x"].tolist() == [0]
    assert held[0][0] == 0  # the view still reads the file


def _pid_or_fail(x: int) -> tuple[int, int]:
    if x == 3:
        raise OSError(5, "unreadable")
    time.sleep(0.2)
    return os.getpid(), x


@pytest.mark.slow
def test_local_cluster_and_this_process_share_the_inputs_each_counted_once():
    from profiler_kit.parallel import Session

    done, skipped = [], []
    with Session(workers=2) as session:

        def here(x):  # this process waits for the cluster before its first result, so both sides read some
            end = time.monotonic() + WAIT_S
            while session.ready_client() is None and time.monotonic() < end:
                time.sleep(0.05)
            return _pid_or_fail(x)

        got = session.map(_pid_or_fail, range(12), local=here, on_done=done.append, skip=lambda k, e: skipped.append(k))
    assert [x for _, x in got] == [x for x in range(12) if x != 3]  # in item order, the failed one left out
    assert sorted(done) == [x for x in range(12) if x != 3]  # progress: once per input read, by either side
    assert skipped == ["3"]
    assert os.getpid() in {pid for pid, _ in got} and len({pid for pid, _ in got}) == 2


def _mark(folder: str, x: int) -> int:
    (Path(folder) / f"{x}.done").touch()
    return x


@pytest.mark.slow
def test_local_cluster_fed_while_this_process_still_reads(tmp_path):
    """The cluster's workers get items as soon as it has started, not when this process ends the item it reads:
    this process's first item waits for a worker's mark, which never came while the feeding waited for it."""
    import functools

    from profiler_kit.parallel import Session

    task = functools.partial(_mark, str(tmp_path))
    waited = []

    def here(x):
        if not waited:
            end = time.monotonic() + WAIT_S
            while not any(tmp_path.glob("*.done")) and time.monotonic() < end:
                time.sleep(0.05)
            waited.append(sorted(p.name for p in tmp_path.glob("*.done")))
        return x

    with Session(workers=2) as session:
        got = session.map(task, range(6), local=here)
    assert got == list(range(6))
    assert waited[0], "no item ran on the cluster while this process read its first"


def test_costliest_inputs_handed_out_first(tmp_path):
    """Order by the estimated cost of reading (``COST_PER_MIB`` times size): a gzipped trace costs ~50 times an
    export of the same size; what names no readable file goes last, in its order."""
    from profiler_kit.parallel import costliest_first

    sizes = {"small.sqlite": 10_000, "big.sqlite": 200_000, "trace.json.gz": 10_000, "trace.json": 10_000}
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(b"x" * size)
    items = [tmp_path / "small.sqlite", "not a path", tmp_path / "missing.sqlite", tmp_path / "trace.json",
             tmp_path / "big.sqlite", tmp_path / "trace.json.gz"]  # fmt: skip
    order = [items[i] for i in costliest_first(items, key=lambda item: item)]
    assert order == [items[5], items[4], items[3], items[0], items[1], items[2]]


def test_progress_bar_only_on_a_terminal(tmp_path):
    """The bar is drawn on a terminal's stderr (here a pseudo-terminal), not with --no-progress, never in a pipe."""
    import pty

    folder = batch(tmp_path, corrupt=False)

    def stderr_of(*options, tty: bool) -> str:
        cmd = [sys.executable, "-m", "profiler_kit", "report", str(folder), "-o", str(tmp_path / "out"), "--no-html",
               "--workers", "1", *options]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        if not tty:
            return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=WAIT_S * 3).stderr
        main, side = pty.openpty()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=side)
        os.close(side)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the terminal's other side closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        proc.wait(timeout=WAIT_S * 3)
        os.close(main)
        return b"".join(chunks).decode(errors="replace")

    n = len(INPUTS)
    drawn = stderr_of(tty=True)
    assert "Analysing" in drawn and f"{n}/{n}" in drawn
    assert "Analysing" not in stderr_of("--no-progress", tty=True)
    assert "Analysing" not in stderr_of(tty=False)
