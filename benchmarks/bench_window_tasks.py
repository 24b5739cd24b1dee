"""report --window on one replicated export: its windows in turn in one process (the default) against its windows
as Dask tasks (analyze/window_tasks.py) with --workers N (2 by default; a local cluster started by the report) and with
--scheduler on a running `dask scheduler` with N `dask worker` processes started before: wall time, CPU, peak
memory per process, identical output.

The export is a shared one replicated along time to about --mib MiB (benchmarks/bench_report.py's ``replicate``).
Each configuration runs as its own `python -m profiler_kit report` process; its process tree (and the running
cluster's workers) is sampled every 50 ms for each process's resident memory and CPU time (the running workers'
CPU counted from the report's start). Prints the load average, since other work on the machine changes the ratio.

    python benchmarks/bench_window_tasks.py [--mib 300] [--window-rows N] [--repeat 1] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_report import replicate  # noqa: E402  (the report bench's own code)
from bench_workers import process_role  # noqa: E402

from tests.conftest import shared_files  # noqa: E402  (the real captures, or the shipped subset)

SOURCE = "zx3xyy__assignment2-systems__result_2_7B_nvtx.sqlite"


def build(work: Path, mib: float) -> Path:
    """The shared export replicated to about ``mib`` MiB (one copy's bytes measured on a 2-copy build)."""
    src = shared_files("nsys_sqlite", SOURCE)
    if not src:
        sys.exit(f"{SOURCE} not found (../shared/data)")
    probe = work / "probe.sqlite"
    replicate(src[0], probe, 2)
    per_copy = max(probe.stat().st_size - src[0].stat().st_size, 1)
    probe.unlink()
    big = work / "replica.sqlite"
    replicate(src[0], big, max(1, round(mib * 2**20 / per_copy)))
    return big


def run(
    export: Path, out: Path, options: list[str], running: list[psutil.Process] = ()
) -> tuple[float, float, dict[str, tuple[int, float]]]:
    """Wall seconds of one report, the CPU seconds of its whole tree (and of the ``running`` cluster's workers
    meanwhile), and per role the largest peak RSS and the most CPU seconds of one process of that role (as last
    sampled)."""
    cmd = [sys.executable, "-m", "profiler_kit", "report", str(export), "-o", str(out), "--no-html", "--no-cache",
           "--format", "csv", "--window", "--no-progress", *options]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    top = psutil.Process(proc.pid)
    seen: dict[int, list] = {}  # pid -> [role, peak rss, cpu]
    cpu0 = {p.pid: sum(p.cpu_times()[:2]) for p in _with_children(running)}
    while proc.poll() is None:
        try:
            tree = [top, *top.children(recursive=True)]
        except psutil.Error:
            tree = []
        for p in [*tree, *_with_children(running)]:
            try:
                rss, times = p.memory_info().rss, p.cpu_times()
                entry = seen.setdefault(p.pid, [process_role(p, top, client="client"), 0, 0.0])
            except psutil.Error:
                continue
            entry[1], entry[2] = max(entry[1], rss), times.user + times.system - cpu0.get(p.pid, 0.0)
        time.sleep(0.05)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    err = proc.stderr.read()
    if proc.returncode != 0:
        sys.exit(f"report {' '.join(options)} failed ({proc.returncode}):\n{err}")
    roles: dict[str, tuple[int, float]] = {}
    for role, rss, cpu in seen.values():
        old = roles.get(role, (0, 0.0))
        roles[role] = (max(old[0], rss), max(old[1], cpu))
    # the reaped tree's rusage misses workers a forkserver forked (not reaped by us): the samples' sum then
    return wall, max(reaped, sum(cpu for _, _, cpu in seen.values())), roles


def _with_children(procs) -> list[psutil.Process]:
    """``procs`` and their descendants (a `dask worker`'s nanny and the worker process it started)."""
    out = []
    for p in procs:
        try:
            out += [p, *p.children(recursive=True)]
        except psutil.Error:
            pass
    return out


class Running:
    """A `dask scheduler` and ``n`` `dask worker` processes (one thread each) on 127.0.0.1, started before the
    report that uses them (--scheduler), stopped on exit."""

    def __init__(self, work: Path, n: int):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        file = work / "scheduler.json"
        run = [sys.executable, "-m"]
        quiet = {"env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        self.procs = [subprocess.Popen([*run, "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                                        "--no-dashboard", "--scheduler-file", str(file)], **quiet)]  # fmt: skip
        while not file.exists() or not file.read_text().strip():
            time.sleep(0.1)
        time.sleep(0.5)
        import json

        self.address = json.loads(file.read_text())["address"]
        for _ in range(n):
            self.procs.append(subprocess.Popen([*run, "distributed.cli.dask_worker", self.address, "--host",
                                                "127.0.0.1", "--nthreads", "1", "--no-dashboard"], **quiet))  # fmt: skip
        from distributed import Client

        with Client(self.address, timeout=60) as client:
            client.wait_for_workers(n, timeout=60)
        self.workers = [psutil.Process(p.pid) for p in self.procs[1:]]

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=float, default=300)
    ap.add_argument("--window-rows", type=int, help="kernel rows a window (default: the report's, about 1M)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each; the fastest counts")
    ap.add_argument("--workers", type=int, default=2, help="workers of the local and of the running cluster")
    ap.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-window-tasks-", dir=args.tmp))
    try:
        export = build(work, args.mib)
        rows = ["--window-rows", str(args.window_rows)] if args.window_rows else []
        print(f"{export.stat().st_size / 2**20:.0f} MiB export; {len(os.sched_getaffinity(0))} cores; "
              f"load average before: {os.getloadavg()[0]:.1f}")  # fmt: skip
        n = args.workers
        cluster = Running(work, n)
        configs = {
            "windows in turn (--workers 1)": ["--workers", "1"],
            f"window tasks (--workers {n})": ["--workers", str(n)],
            f"window tasks (--scheduler, {n} running workers)": ["--scheduler", cluster.address],
        }
        best, outs = {}, {}
        try:
            for _ in range(args.repeat):
                for name, options in configs.items():
                    out = work / "out"
                    shutil.rmtree(out, ignore_errors=True)
                    got = run(export, out, [*options, *rows], cluster.workers if "--scheduler" in options else [])
                    outs[name] = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
                    if name not in best or got[0] < best[name][0]:
                        best[name] = got
        finally:
            cluster.close()
        for name, (wall, cpu, roles) in best.items():
            per = ", ".join(f"{role} {rss / 2**20:.0f} MiB / {c:.1f} CPU-s" for role, (rss, c) in sorted(roles.items()))
            print(f"{name}: {wall:.2f} s wall, {cpu:.1f} CPU-s in all; per process (peak RSS / CPU): {per}")
        first, local, running = (best[name][0] for name in configs)
        same = len({str(sorted(o.items())) for o in outs.values()}) == 1
        print(f"speed ratio (in turn / tasks): --workers {n} {first / local:.2f}x, --scheduler {first / running:.2f}x; "
              f"identical output: {'yes' if same else 'NO'}; load average after: {os.getloadavg()[0]:.1f}")  # fmt: skip
        if not same:
            sys.exit(1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":  # the local cluster's workers are forked processes: nothing runs on their import
    main()
