"""Time `profiler-kit diff` of two big exports against `profiler-kit report` of one, in the same run.

Builds two exports by replicating a real one along the time axis (bench_report.replicate), the second
with one kernel's instances 20% longer (so that the diff has a change to find), then runs, interleaved,
``report BASE`` and ``diff BASE NEW`` as subprocesses, without the Arrow cache and with it (the
cached runs after one untimed run of each that writes the caches), and prints wall time and peak
memory of each and the ratio of medians (the goal: diff no more than twice one report).

    python benchmarks/bench_diff.py ../shared/data/nsys_sqlite/zx3xyy__assignment2-systems__result_2_7B_nvtx.sqlite --copies 150
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from benchmarks.bench_report import PROFILER_KIT_WITH_CHILDREN, replicate, spread, timed  # noqa: E402


def lengthen_top_kernel(export: Path, factor: float = 1.2) -> str:
    """Make every instance of the kernel with the most GPU time ``factor`` times longer; its name."""
    with sqlite3.connect(export) as con:
        (name_id,) = con.execute(
            "SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY demangledName ORDER BY sum(end - start) DESC"
        ).fetchone()
        con.execute(
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + CAST((end - start) * ? AS INTEGER) "
            "WHERE demangledName = ?",
            (factor, name_id),
        )
        return con.execute("SELECT value FROM StringIds WHERE id = ?", (name_id,)).fetchone()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export", type=Path)
    ap.add_argument("--copies", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=3, help="Runs of each command; medians and ranges are printed.")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pk-bench-diff-"))
    try:
        run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path) -> None:
    base, new = work / "base.sqlite", work / "new.sqlite"
    counts = replicate(args.export, base, args.copies)
    shutil.copy(base, new)
    name = lengthen_top_kernel(new)
    print(f"built {base.name} and {new.name} ({base.stat().st_size / 2**20:.0f} MiB each): {counts}")
    print(f"NEW: {name[:80]} 20% longer")
    root = Path(__file__).resolve().parent.parent
    pk = [sys.executable, "-c", PROFILER_KIT_WITH_CHILDREN]
    commands = {
        "report BASE": [*pk, "report", str(base), "-o", str(work / "report")],
        "diff BASE NEW": [*pk, "diff", str(base), str(new), "-o", str(work / "diff")],
    }
    runs: dict[str, list[tuple[float, float, int]]] = {}
    for cache in ("--no-cache", "cached"):
        if cache == "cached":  # one untimed run of each writes the caches both then read
            for cmd in commands.values():
                timed(cmd, root, work)
        for _ in range(args.repeat):
            for label, cmd in commands.items():
                runs.setdefault(f"{label} ({cache})", []).append(
                    timed([*cmd, *([cache] if cache != "cached" else [])], root, work)
                )
    for label, rs in runs.items():
        print(f"{label}: {spread([r[0] for r in rs])} s, peak RSS {spread([r[1] for r in rs], 0)} MiB")
    for cache in ("--no-cache", "cached"):
        rep = statistics.median(r[0] for r in runs[f"report BASE ({cache})"])
        dif = statistics.median(r[0] for r in runs[f"diff BASE NEW ({cache})"])
        print(f"ratio of medians ({cache}): diff {dif:.2f} s / report {rep:.2f} s = {dif / rep:.2f} (goal <= 2)")


if __name__ == "__main__":
    main()
