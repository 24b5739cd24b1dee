"""report --workers N (2) against --workers 1 on 32 inputs: wall time, identical output, peak memory per process.

The inputs are copies of the real captures in ../shared/data (nsys SQLite exports, each replicated --copies times
along time, and Kineto traces; without that folder, those shipped in tests/data) under distinct names in a
temporary folder. Each configuration runs
as its own `python -m profiler_kit report` process; the process tree is sampled every 50 ms for each process's
resident memory. Prints the load average, since other work on the machine changes the ratio.

    python benchmarks/bench_workers.py [--inputs 32] [--copies 8] [--repeat 1] [--workers 2] [--reduce]

--reduce also times the client's part per result: unpickling it (the gather) and building the markdown report from
32, 256 and 1,024 of them (the reduce), in this process.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import shared_files  # noqa: E402  (the real captures, or the shipped subset)


def inputs() -> list[Path]:
    return [*shared_files("nsys_sqlite", "*.sqlite"), *shared_files("kineto", "*.json.gz")]


def make_batch(folder: Path, n: int, copies: int) -> None:
    """``n`` inputs cycling over the real captures; each nsys export replicated ``copies`` times along time
    (bench_report.replicate: a longer capture of the same job, as one rank of a real run)."""
    from benchmarks.bench_report import replicate

    srcs = inputs()
    if not srcs:
        sys.exit("no real captures found (../shared/data or tests/data/real)")
    if copies > 1:
        longer = folder.parent / "replicated"
        longer.mkdir()
        for k, src in enumerate(srcs):
            if src.suffix == ".sqlite":
                try:
                    replicate(src, longer / src.name, copies)
                    srcs[k] = longer / src.name
                except ValueError:  # none of the tables replicate knows (an older schema): kept as it is
                    pass
    for i in range(n):
        src = srcs[i % len(srcs)]
        shutil.copyfile(src, folder / f"{i:03d}_{src.name}")


def run(folder: Path, out: Path, workers: int) -> tuple[float, dict[str, int], float, dict[str, float]]:
    """Wall seconds of one report, the peak RSS of each process of its tree by role, the CPU seconds of the whole
    tree (its reaped children's rusage) and the CPU seconds of each process as last sampled."""
    cmd = [sys.executable, "-m", "profiler_kit", "report", str(folder), "-o", str(out), "--no-html", "--no-cache",
           "--workers", str(workers)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cpu0 = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peaks: dict[int, tuple[str, int]] = {}
    cpu: dict[int, float] = {}
    top = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            tree = [top, *top.children(recursive=True)]
        except psutil.Error:
            tree = []
        for p in tree:
            try:
                rss = p.memory_info().rss
                times = p.cpu_times()
                cpu[p.pid] = times.user + times.system
                role = peaks.get(p.pid, (None, 0))[0] or process_role(p, top)
            except psutil.Error:
                continue
            peaks[p.pid] = (role, max(rss, peaks.get(p.pid, ("", 0))[1]))
        time.sleep(0.05)
    wall = time.perf_counter() - start
    # the reaped tree's rusage misses the workers a forkserver forked (not our children): the samples' sum
    total_cpu = max(_children_cpu() - cpu0, sum(cpu.values()))
    err = proc.stderr.read()
    if proc.returncode != 0:
        sys.exit(f"report --workers {workers} failed ({proc.returncode}):\n{err}")
    by_role: dict[str, int] = {}
    cpu_by_role: dict[str, float] = {}
    for pid, (role, rss) in peaks.items():
        by_role[role] = max(by_role.get(role, 0), rss)
        cpu_by_role[role] = max(cpu_by_role.get(role, 0.0), cpu.get(pid, 0.0))
    return wall, by_role, total_cpu, cpu_by_role


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def process_role(
    p: psutil.Process, top: psutil.Process, client: str = "client (reads too; report, scheduler, nannies)"
) -> str:
    """What a process of the report's tree (``top``) or of a running cluster (bench_window_tasks.py) is."""
    if p.pid == top.pid:
        return client
    cmd = " ".join(p.cmdline())
    if "multiprocessing.resource_tracker" in cmd:
        return "resource tracker"
    if "multiprocessing.forkserver" in cmd:  # the server (the client's child) and the workers it forks
        return "forkserver" if p.ppid() == top.pid else "worker"
    if "dask_worker" in cmd:  # a `dask worker` started before the report (--scheduler)
        return "running worker's nanny"
    if "multiprocessing" in cmd and p.ppid() != top.pid:  # the worker process that nanny started
        return "running worker"
    return "worker" if "spawn_main" in cmd else cmd[:40]  # spawn_main: spawned by a nanny (method spawn)


def reduce_cost(scale: tuple[int, ...] = (32, 256, 1024)) -> None:
    """The client's share: per result, its pickled size and unpickling time (the gather), and the markdown
    report built and rendered from n results, each trace's section built and rendered in its task as `report`
    does: the distinct captures' results repeated (a result holds summary tables and its section, whose size
    does not grow with a capture's length)."""
    import pickle

    from profiler_kit import process

    process.tune_report()
    from profiler_kit.analyze.sources import discover

    from profiler_kit.build import analyze_item, build_report
    from profiler_kit.output import render_report_files

    results = [analyze_item((src, src.path.name), top=15, markdown=True) for src in discover(inputs())]
    blobs = [pickle.dumps(r, protocol=5) for r in results]
    start = time.process_time()
    for b in blobs:
        pickle.loads(b)
    unpickle = (time.process_time() - start) / len(blobs)
    sizes = sorted(len(b) for b in blobs)
    print(f"client gather: {sizes[len(sizes) // 2] / 1024:.0f} KiB pickled per result (median; "
          f"{sizes[0] / 1024:.0f}-{sizes[-1] / 1024:.0f}), {unpickle * 1e3:.1f} ms CPU to unpickle one")  # fmt: skip
    for n in scale:
        many = [results[i % len(results)] for i in range(n)]
        many = [type(r)(f"{i:04d}_{r.label}", r.source, r.meta, r.tables, r.section) for i, r in enumerate(many)]
        start = time.process_time()
        render_report_files(build_report(many), "report", "md", html=False)
        took = time.process_time() - start
        print(f"client reduce: markdown report of {n} results built and rendered in {took:.2f} CPU-s, "
              f"{took / n * 1e3:.0f} ms per result")  # fmt: skip


def files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=32)
    ap.add_argument("--copies", type=int, default=8, help="each nsys export replicated this many times along time")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each; the fastest counts")
    ap.add_argument("--workers", type=int, default=2, help="the cluster size timed against --workers 1")
    ap.add_argument("--reduce", action="store_true", help="also time the client's gather and reduce per result")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        folder = Path(tmp) / "in"
        folder.mkdir()
        make_batch(folder, args.inputs, args.copies)
        size = sum(p.stat().st_size for p in folder.iterdir())
        print(f"{args.inputs} inputs, {size / 2**20:.1f} MiB, {len(inputs())} distinct captures; "
              f"{len(os.sched_getaffinity(0))} cores; load average before: {os.getloadavg()[0]:.1f}")  # fmt: skip
        best: dict[int, tuple] = {}
        outs = {}
        for _ in range(args.repeat):
            for workers in (1, args.workers):
                out = Path(tmp) / f"out{workers}"
                shutil.rmtree(out, ignore_errors=True)
                got = run(folder, out, workers)
                outs[workers] = files(out)
                if workers not in best or got[0] < best[workers][0]:
                    best[workers] = got
        same = outs[1] == outs[args.workers]
        for workers, (wall, mem, total_cpu, cpu) in best.items():
            per = ", ".join(f"{role} {rss / 2**20:.0f} MiB" for role, rss in sorted(mem.items()))
            busiest = ", ".join(f"{role} {s:.1f} s" for role, s in sorted(cpu.items()) if s >= 0.5)
            print(f"--workers {workers}: {wall:.2f} s wall, {total_cpu:.1f} CPU-s in all (most per process: "
                  f"{busiest}); peak RSS per process: {per}")  # fmt: skip
        n = args.workers
        print(f"speed ratio (--workers 1 time / --workers {n} time): {best[1][0] / best[n][0]:.2f}x; "
              f"identical output: {'yes' if same else 'NO'}; load average after: {os.getloadavg()[0]:.1f}")  # fmt: skip
        if args.reduce:
            reduce_cost()
        if not same:
            sys.exit(1)


if __name__ == "__main__":  # the local cluster's workers are spawned processes: nothing runs on their import
    main()
