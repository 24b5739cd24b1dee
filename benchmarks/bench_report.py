"""Time `profiler-kit report` against `nsys stats` on one large export, in the same run.

Builds the export by replicating a real one along the time axis (every kernel,
runtime call, memcpy/memset and NVTX event copied N times, shifted by the
export's span, correlation ids made unique; rows in time order, copy after copy,
as a real export of a longer run stores them), then runs both tools as
subprocesses and prints wall time and peak memory (max RSS; for profiler-kit, its own plus its
early-read child's) of each and the ratios.
Ours runs three ways: without the Arrow cache (--no-cache), first run (reads
SQLite and writes the cache beside the export) and cached run (reads the cache);
each command runs ``--repeat`` times, ours and nsys' interleaved in each round (a
busy spell of a shared machine then hits both tools), and the ratio is of medians.
CPU time (user + system, the command and every process it waited for) is printed
beside wall time: on a loaded machine it is the steadier figure.

    python benchmarks/bench_report.py ../shared/data/nsys_sqlite/zx3xyy__assignment2-systems__result_2_7B_nvtx.sqlite --copies 150
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from profiler_kit.analyze.trace_cache import cache_dir  # noqa: E402  (imports nothing heavy)

SHIFTED = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "NVTX_EVENTS",
)


def replicate(src: Path, dst: Path, copies: int) -> dict[str, int]:
    """Write ``dst``: ``src`` with its activity tables repeated ``copies`` times along time.

    The copies are appended one after another (each one's rows in the source's rowid order, start and end
    shifted by k spans, correlation ids by k times the largest one), so rowids follow time as in an export
    nsys writes. (Earlier versions appended the copies of each source row together, an order no export has:
    the same report took ~0.08 s longer on it.) Each copy is one INSERT from the source attached read-only,
    whose rowid order is its scan order, with no journal and no syncs: one sorted INSERT of all copies took
    642 s for 1 GB, sorting every row it wrote.
    """
    shutil.copy(src, dst)
    dst.chmod(0o644)
    con = sqlite3.connect(dst, uri=True)
    for pragma in ("journal_mode = OFF", "synchronous = OFF", "cache_size = -65536", "temp_store = MEMORY"):
        con.execute(f"PRAGMA {pragma}")  # a file under construction: nothing to roll back if the build fails
    con.execute("ATTACH DATABASE ? AS src", (src.resolve().as_uri() + "?mode=ro",))
    tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'") if t in SHIFTED]
    lo = min(con.execute(f"SELECT min(start) FROM {t}").fetchone()[0] or 0 for t in tables)
    hi = max(con.execute(f"SELECT max(coalesce(end, start)) FROM {t}").fetchone()[0] or 0 for t in tables)
    span = hi - lo + 1_000_000
    ids = (con.execute(f"SELECT max(correlationId) FROM {t}").fetchone()[0] or 0 for t in tables if t != "NVTX_EVENTS")
    corr = max(ids, default=0) + 1  # a CPU-only export has no CUDA tables
    counts = {}
    for t in tables:  # table after table, so each one's pages lie together in the file as before
        cols = [r[1] for r in con.execute(f"PRAGMA main.table_info({t})")]
        shifted = {"start": ":span", "end": ":span"} | ({} if t == "NVTX_EVENTS" else {"correlationId": ":corr"})
        names = [f'"{c}"' for c in cols]
        select = [f"{n} + {shifted[c]}" if c in shifted else n for c, n in zip(cols, names, strict=True)]
        insert = f"INSERT INTO main.{t} ({', '.join(names)}) SELECT {', '.join(select)} FROM src.{t} ORDER BY rowid"
        for k in range(1, copies):
            con.execute(insert, {"span": k * span, "corr": k * corr})
        counts[t] = con.execute(f"SELECT count(*) FROM main.{t}").fetchone()[0]
    con.commit()
    con.close()
    return counts


PEAK_WRAPPER = (
    "import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True); "
    "r = resource.getrusage(resource.RUSAGE_CHILDREN); print(r.ru_maxrss, p.returncode, r.ru_utime + r.ru_stime); "
    "sys.stderr.write(p.stderr[-300:])"
)
# profiler-kit as ``python -m profiler_kit``, adding the peak RSS of every child it reaps (the early read's
# forked reader, analyze/early_read.py) to its own, written to PK_PEAK_FILE at exit: the wrapper's
# RUSAGE_CHILDREN gives only the largest process's peak, and both processes live at once.
PROFILER_KIT_WITH_CHILDREN = """
import atexit, os, resource, runpy, sys
reaped = []
def waitpid(pid, options, wait4=os.wait4):
    pid, status, usage = wait4(pid, options)
    reaped.append(usage.ru_maxrss)
    return pid, status
def write_peaks():
    with open(os.environ["PK_PEAK_FILE"], "w") as fh:
        fh.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss + sum(reaped)))
os.waitpid = waitpid
atexit.register(write_peaks)  # registered first, so it runs last: after the early read's child is reaped
sys.argv = ["profiler-kit", *sys.argv[1:]]
runpy.run_module("profiler_kit", run_name="__main__")
"""


def timed(cmd: list[str], cwd: Path, scratch: Path) -> tuple[float, float, int, float]:
    """Wall seconds, peak RSS (MiB), return code, CPU seconds (user + system of the command and its waited-for
    descendants: RUSAGE_CHILDREN counts a grandchild once its parent reaped it).

    A fresh wrapper process runs the command, so the peak is this command's alone: the largest
    process's peak, or for profiler-kit (run through PROFILER_KIT_WITH_CHILDREN) the sum of its
    own and its children's (in a file under ``scratch``).
    """
    peak_file = Path(tempfile.mkstemp(dir=scratch, prefix="peak-")[1])
    env = {**os.environ, "PK_PEAK_FILE": str(peak_file)}
    os.sync()  # what the previous command wrote (a report, a cache folder, an nsys export) goes to disk now, untimed
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", PEAK_WRAPPER, *cmd], cwd=cwd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    peak, code, cpu = proc.stdout.split()
    peak_kib, rc = int(peak), int(code)
    peak_kib = int(peak_file.read_text() or peak_kib)
    peak_file.unlink()
    if rc:
        print(f"  {cmd[0]} failed: {proc.stderr.strip()}", file=sys.stderr)
    return wall, peak_kib / 1024, rc, float(cpu)


STAGES = """
import sys, time
from pathlib import Path
marks = [time.perf_counter()]
from profiler_kit.analyze.breakdown import analyze_trace
from profiler_kit.analyze.sources import Source, read_trace
from profiler_kit.analyze.trace_cache import CacheWriter
from profiler_kit.build import REPORT_TABLES, TraceResult, build_report
from profiler_kit.output import render_report_files
marks.append(time.perf_counter())
trace = read_trace(Source(Path(sys.argv[1]), "nsys-sqlite"), details=False, cache=CacheWriter())
marks.append(time.perf_counter())
tables = analyze_trace(trace, REPORT_TABLES)
marks.append(time.perf_counter())
report = build_report([TraceResult("big", sys.argv[1], trace.meta, tables)])
marks.append(time.perf_counter())
render_report_files(report, "report")
marks.append(time.perf_counter())
print(" ".join(f"{b - a:.3f}" for a, b in zip(marks, marks[1:])))
"""
STAGE_NAMES = ("imports", "read (Arrow cache)", "analyze_trace", "build_report", "render md + html")


def stage_times(big: Path, cwd: Path) -> dict[str, float]:
    """Seconds per stage of a cached report, timed inside one fresh process (no CLI, no file writes)."""
    env = {**os.environ, "NUMPY_MADVISE_HUGEPAGE": "0"}  # as the CLI sets it (profiler_kit/cli.py)
    out = subprocess.run(
        [sys.executable, "-c", STAGES, str(big)], cwd=cwd, capture_output=True, text=True, check=True, env=env
    )
    return dict(zip(STAGE_NAMES, (float(v) for v in out.stdout.split()), strict=True))


def spread(values: list[float], digits: int = 2) -> str:
    """Median and range of repeated measurements: ``1.23 (1.20-1.31)``."""
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export", type=Path)
    ap.add_argument("--copies", type=int, default=150)
    ap.add_argument("--keep", type=Path, help="Write the big export here and keep it.")
    ap.add_argument("--skip-nsys", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="Runs of each command; medians and ranges are printed.")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pk-bench-"))
    try:  # the folder goes whatever happens (with --keep the export lives elsewhere)
        run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


PACKAGE_FOLDERS = ("profiler_kit", "analyze", "workloads")


def compile_package(root: Path) -> None:
    """Write the bytecode of profiler-kit's modules now, as an installed package has it (pip compiles at install).

    In a checkout, with PYTHONDONTWRITEBYTECODE set (as on the shared VMs) and a module newer than its bytecode
    (a merge), every timed report compiled that module again: with no bytecode at all, 0.37 s of a 2 s report.
    """
    for folder in PACKAGE_FOLDERS:
        compileall.compile_dir(root / folder, quiet=1)


def run(args: argparse.Namespace, work: Path) -> None:
    """Build the export, time both tools and print the figures."""
    big = args.keep or work / "big.sqlite"
    t0 = time.perf_counter()
    counts = replicate(args.export, big, args.copies)
    os.sync()  # the file's pages go to disk now, not while the first timed command runs
    print(f"built {big} ({big.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t0:.1f} s: {counts}")
    root = Path(__file__).resolve().parent.parent
    compile_package(root)
    report = [sys.executable, "-c", PROFILER_KIT_WITH_CHILDREN, "report", str(big), "-o", str(work / "out")]
    ours: dict[str, list[tuple[float, float, int, float]]] = {"no cache": [], "first run": [], "cached run": []}
    theirs: dict[str, list[tuple[float, float, int, float]]] = {"gpukernsum": [], "nvtxkernsum": []}
    with_nsys = not args.skip_nsys and shutil.which("nsys") is not None
    for _ in range(args.repeat):  # interleaved, so a slow spell of the machine hits every kind of run
        ours["no cache"].append(timed([*report, "--no-cache"], root, work))
        shutil.rmtree(cache_dir(big), ignore_errors=True)
        ours["first run"].append(timed(report, root, work))
        ours["cached run"].append(timed(report, root, work))
        for rep, runs in theirs.items() if with_nsys else ():
            copy = work / f"{rep}.sqlite"
            shutil.copy(big, copy)
            nsys = ["nsys", "stats", "-q", "--force-export", "false", "--force-overwrite", "true", "--format", "csv"]
            nsys += ["--report", rep]
            runs.append(timed([*nsys, "-o", str(work / rep), str(copy)], root, work))
            os.unlink(copy)
    for label, runs in ours.items():
        print(f"profiler-kit report (md + html), {label}: {spread([r[0] for r in runs])} s, "
              f"CPU {spread([r[3] for r in runs])} s, peak RSS {spread([r[1] for r in runs], 0)} MiB")  # fmt: skip
    stages = stage_times(big, root)
    print("stages of a cached report, in-process: " + ", ".join(f"{k} {v:.2f} s" for k, v in stages.items()))
    if not with_nsys:
        print("nsys not run")
        return
    for rep, runs in theirs.items():
        print(
            f"nsys stats --report {rep}: {spread([r[0] for r in runs])} s, CPU {spread([r[3] for r in runs])} s, "
            f"peak RSS {spread([r[1] for r in runs], 0)} MiB"
        )
    failed = [name for name, runs in {**ours, **theirs}.items() if any(r[2] for r in runs)]
    if failed:  # a failed run's time says nothing: no ratio from it
        print(f"no ratio: these runs failed: {', '.join(failed)}")
        return
    for i, what in ((0, "wall"), (3, "CPU")):
        nsys_total = statistics.median(
            a[i] + b[i] for a, b in zip(theirs["gpukernsum"], theirs["nvtxkernsum"], strict=True)
        )
        for label, runs in ours.items():
            mine = statistics.median(r[i] for r in runs)
            print(
                f"ratio of medians ({what}), {label}: nsys stats (gpukernsum + nvtxkernsum) {nsys_total:.2f} s / "
                f"profiler-kit whole report {mine:.2f} s = {nsys_total / mine:.1f}x"
            )


if __name__ == "__main__":
    main()
