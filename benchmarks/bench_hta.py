"""Time Holistic Trace Analysis (HTA) against profiler-kit on one Kineto trace, in the same run.

HTA side (its own virtual environment: HolisticTraceAnalysis 0.5.0, numpy < 2, pandas < 3 (its call graph
fails on pandas 3), run with ``include_last_profiler_step=True`` and ``HTA_DISABLE_NS_ROUNDING=1`` so that its
figures are ours, docs/hta_parity.md): load the trace, then the analyses profiler-kit also makes: temporal
breakdown, idle time breakdown, kernel launch stats, queue length summary, frequent CUDA kernel sequences
(operator "aten::"), communication/computation overlap.

profiler-kit side: the whole ``profiler-kit report`` command (read, every analysis, findings, markdown +
HTML written), and, in a process of its own, ``build.analyze_source`` (read + analyses, no rendering).

Each side runs as a fresh subprocess, ``--repeat`` times, interleaved; the figures are medians of CPU time
(user + sys of the process and its children: the machine is shared, wall time is given too) and the ratios
are HTA's over ours. Each HTA child also reports its own phase times; the temporal breakdown's compute time of
both sides is compared as a check that the two did the same work.

    python benchmarks/bench_hta.py [--trace T.json.gz] [--hta-python /work/venv-hta/bin/python] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import provenance, write_json

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data" / "kineto"

HTA_CHILD = r"""
import json, logging, sys, tempfile, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
phases = {"import": time.perf_counter() - t0}
def timed(name, fn):
    t = time.perf_counter()
    out = fn()
    phases[name] = time.perf_counter() - t
    return out
a = timed("load", lambda: TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True))
tb = timed("temporal", lambda: a.get_temporal_breakdown(visualize=False))
timed("idle", lambda: a.get_idle_time_breakdown(visualize=False))
timed("launch_stats", lambda: a.get_cuda_kernel_launch_stats(visualize=False))
timed("queue_length", lambda: a.get_queue_length_summary())
out_dir = tempfile.mkdtemp()
timed("kernel_sequences", lambda: a.get_frequent_cuda_kernel_sequences("aten::", out_dir, visualize=False))
timed("comm_comp_overlap", lambda: a.get_comm_comp_overlap(visualize=False))
print(json.dumps({"phases": phases, "compute_ns": round(float(tb["compute_time(us)"].iloc[0]) * 1000)}))
"""

OURS_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from profiler_kit.analyze.sources import discover
from profiler_kit.build import analyze_source
t1 = time.perf_counter()
res = analyze_source(discover([sys.argv[1]])[0], "trace")
t2 = time.perf_counter()
print(json.dumps({"phases": {"import": t1 - t0, "load_and_analyses": t2 - t1},
                  "compute_ns": int(res.tables["temporal"]["compute_ns"].sum()), "tables": len(res.tables)}))
"""


def largest_kineto(folder: Path) -> Path:
    files = [p for p in folder.glob("*.json*") if p.is_file()]
    if not files:
        sys.exit(f"no Kineto trace in {folder}; pass --trace")
    return max(files, key=lambda p: p.stat().st_size)


def run(cmd: list[str], env: dict | None = None) -> dict:
    """Run ``cmd``; its wall time, CPU time (user + sys, its children included) and stdout's last line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        sys.exit(f"{cmd[0]} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = proc.stdout.strip().splitlines()
    return {"wall_s": wall, "cpu_s": cpu, "out": lines[-1] if lines else ""}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, help="a Kineto trace (default: the largest in ../shared/data/kineto)")
    ap.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON", "/work/venv-hta/bin/python"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write the figures here too")
    args = ap.parse_args(argv)
    trace = (args.trace or largest_kineto(SHARED)).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "trace"  # HTA reads every trace of a folder: this one alone
        folder.mkdir()
        shutil.copy(trace, folder / trace.name)
        hta_env = os.environ | {"HTA_DISABLE_NS_ROUNDING": "1"}
        sides = {
            "hta": lambda: run([args.hta_python, "-c", HTA_CHILD, str(folder)], hta_env),
            "ours_report": lambda: run(
                [sys.executable, "-m", "profiler_kit", "report", str(trace), "-o", f"{tmp}/report", "--no-cache"]
            ),
            "ours_analyses": lambda: run([sys.executable, "-c", OURS_CHILD, str(trace)]),
        }
        runs: dict[str, list[dict]] = {k: [] for k in sides}
        for i in range(args.repeat):
            for name in sides if i % 2 == 0 else reversed(list(sides)):  # interleaved, order alternating
                runs[name].append(sides[name]())
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("cpu_s", "wall_s")} for k, v in runs.items()}
    hta_out = json.loads(runs["hta"][-1]["out"])
    ours_out = json.loads(runs["ours_analyses"][-1]["out"])
    result = {
        "trace": trace.name,
        "trace_bytes": trace.stat().st_size,
        "repeat": args.repeat,
        **provenance(),
        "median": med,
        "ratio_cpu": {k: med["hta"]["cpu_s"] / med[k]["cpu_s"] for k in ("ours_report", "ours_analyses")},
        "ratio_wall": {k: med["hta"]["wall_s"] / med[k]["wall_s"] for k in ("ours_report", "ours_analyses")},
        "hta_phases_s": hta_out["phases"],
        "ours_phases_s": ours_out["phases"],
        "same_compute_ns": hta_out["compute_ns"] == ours_out["compute_ns"],
        "runs": {k: [{m: r[m] for m in ("cpu_s", "wall_s")} for r in v] for k, v in runs.items()},
    }
    print(f"trace {trace.name} ({trace.stat().st_size / 2**20:.2f} MiB), {args.repeat} runs each, medians")
    for k, v in med.items():
        print(f"  {k:14s} CPU {v['cpu_s']:6.2f} s   wall {v['wall_s']:6.2f} s")
    for k in ("ours_report", "ours_analyses"):
        print(f"  HTA / {k}: {result['ratio_cpu'][k]:.1f}x CPU, {result['ratio_wall'][k]:.1f}x wall")
    print("  HTA phases (s): " + ", ".join(f"{k} {v:.2f}" for k, v in hta_out["phases"].items()))
    print(f"  temporal compute time equal on both sides: {result['same_compute_ns']}")
    print(f"  load average {result['load_average'][0]:.1f} on {result['cpus']} CPUs")
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
