"""A windowed `profiler-kit report --window` of a replicated export of --gb GB: time and peak memory, against
`nsys stats --report gpukernsum,nvtxkernsum` on the same file in the same run.

The export is a shared one replicated along time (benchmarks/bench_report.py's ``replicate``), as many copies as
make --gb GB (the bytes of one copy measured on a 2-copy build first). Both tools run as fresh processes; peak
memory is max RSS (profiler-kit's own plus any child's, as bench_report measures it). The replicated files live
in a temporary folder under --tmp and are deleted at the end. ``--skip-nsys`` (for 10 GB, where nsys would need
~36 GB) times ours alone. Figures and how long each size takes to build: benchmarks/README.md.

    python benchmarks/bench_window.py --gb 1 --json benchmarks/results/window/bench_window_1gb.json
    python benchmarks/bench_window.py --gb 10 --skip-nsys --skip-whole --json benchmarks/results/window/bench_window_10gb.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_report import PROFILER_KIT_WITH_CHILDREN, replicate, timed  # noqa: E402  (the report bench's own code)

SOURCE = Path(__file__).resolve().parent.parent.parent / "shared/data/nsys_sqlite"
DEFAULT_EXPORT = SOURCE / "zx3xyy__assignment2-systems__result_2_7B_nvtx.sqlite"


def copies_for(src: Path, gb: float, work: Path) -> int:
    """Copies of ``src`` whose replication takes about ``gb`` GB: one copy's bytes from a 2-copy build."""
    probe = work / "probe.sqlite"
    replicate(src, probe, 2)
    per_copy = max(probe.stat().st_size - src.stat().st_size, 1)
    probe.unlink()
    return max(1, round(gb * 2**30 / per_copy))


def table_rows(path: Path) -> dict[str, int]:
    """Rows of the activity tables of an export."""
    import sqlite3

    with sqlite3.connect(path) as con:
        names = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {
            t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
            for t in names
            if "ACTIVITY" in t or t == "NVTX_EVENTS"
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export", type=Path, nargs="?", default=DEFAULT_EXPORT)
    ap.add_argument("--gb", type=float, default=1.0, help="Size of the replicated export (GB).")
    ap.add_argument("--window-rows", type=int, help="Kernel rows a window (default: the report's, about 1M).")
    ap.add_argument("--skip-nsys", action="store_true")
    ap.add_argument("--skip-whole", action="store_true", help="Do not time the in-memory report (--no-cache) too.")
    ap.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--json", type=Path, help="Write the figures here.")
    ap.add_argument("--built", type=Path, help="A replicated export built before (kept by the caller): no build.")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print(f"{shutil.disk_usage(args.tmp).free / 2**30:.1f} GiB free under {args.tmp}, load {load:.1f}")
    work = Path(tempfile.mkdtemp(prefix="pk-window-", dir=args.tmp))
    try:
        figures = run(args, work) | {"load_start": round(load, 1)}
        figures["machine"] = f"{platform.node()} {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the end"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


def run(args: argparse.Namespace, work: Path) -> dict:
    if args.built:
        big, copies, build_s = args.built, None, None
        counts = {t: n for t, n in table_rows(big).items()}
    else:
        big = work / "big.sqlite"
        copies = copies_for(args.export, args.gb, work)
        t0 = time.perf_counter()
        counts = replicate(args.export, big, copies)
        os.sync()
        build_s = round(time.perf_counter() - t0, 1)
        written = sum(counts.values()) * (copies - 1) // copies
        print(f"built {big.name}: {copies} copies in {build_s:.0f} s ({written / build_s:,.0f} rows written a second)")
    size = big.stat().st_size
    print(f"export {size / 2**30:.2f} GiB: {counts}")
    root = Path(__file__).resolve().parent.parent
    report = [sys.executable, "-c", PROFILER_KIT_WITH_CHILDREN, "report", str(big), "-o", str(work / "out")]
    window = ["--window", *(["--window-rows", str(args.window_rows)] if args.window_rows else [])]
    wall, peak, rc, cpu = timed([*report, *window], root, work)
    said = re.search(r"Read in (\d+) time window", "".join(f.read_text() for f in (work / "out").glob("*.md")))
    windows = int(said[1]) if said else None  # the number the report itself states
    print(
        f"profiler-kit report --window: {wall:.2f} s wall, {cpu:.2f} s CPU, peak RSS {peak:.0f} MiB, "
        f"{windows} windows, exit {rc}"
    )
    figures = {
        "export": args.export.name,
        "copies": copies,
        "bytes": size,
        "rows": counts,
        "window_rows": args.window_rows,
        "windows": windows,
        "build_s": build_s,
        "ours_s": round(wall, 2),
        "ours_cpu_s": round(cpu, 2),
        "ours_peak_mib": round(peak),
        "ours_rc": rc,
        "date": time.strftime("%Y-%m-%d"),
    }
    if not args.skip_whole:
        whole = [*report, "--no-cache"]
        w_wall, w_peak, w_rc, w_cpu = timed(whole, root, work)
        print(f"profiler-kit report (in memory): {w_wall:.2f} s wall, {w_cpu:.2f} s CPU, peak RSS {w_peak:.0f} MiB")
        figures |= {"whole_s": round(w_wall, 2), "whole_cpu_s": round(w_cpu, 2), "whole_peak_mib": round(w_peak)}
        figures["whole_rc"] = w_rc
    if args.skip_nsys or shutil.which("nsys") is None:
        print("nsys not run")
        return figures
    nsys = ["nsys", "stats", "-q", "--force-export", "false", "--force-overwrite", "true", "--format", "csv"]
    copy = work / "nsys.sqlite"  # nsys stats may add to the file it reads: a copy of it, made untimed
    shutil.copy(big, copy)
    nsys += ["--report", "gpukernsum,nvtxkernsum", "-o", str(work / "nsys"), str(copy)]
    their_wall, their_peak, their_rc, their_cpu = timed(nsys, root, work)
    print(
        f"nsys stats --report gpukernsum,nvtxkernsum: {their_wall:.2f} s wall, {their_cpu:.2f} s CPU, "
        f"peak RSS {their_peak:.0f} MiB, exit {their_rc}"
    )
    figures |= {"nsys_s": round(their_wall, 2), "nsys_cpu_s": round(their_cpu, 2)}
    figures |= {"nsys_peak_mib": round(their_peak), "nsys_rc": their_rc}
    if not rc and not their_rc:
        figures["ratio_wall"] = round(their_wall / wall, 1)
        figures["ratio_cpu"] = round(their_cpu / cpu, 1)
        print(
            f"ratio, wall: nsys stats {their_wall:.2f} s / profiler-kit --window {wall:.2f} s = {their_wall / wall:.1f}x"
        )
        print(f"ratio, CPU: nsys stats {their_cpu:.2f} s / profiler-kit --window {cpu:.2f} s = {their_cpu / cpu:.1f}x")
    return figures


if __name__ == "__main__":
    main()
