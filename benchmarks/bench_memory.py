"""Parse + analyze time for a ~1M-event memory snapshot, side by side with torch.cuda._memory_viz.

The big snapshot is a real one replicated: each copy's addresses (events,
segments, blocks) are shifted by ``copy << 48`` so copies never collide, and its
times by the trace's span, so the replay sees one long consistent trace. Copies
share frame objects, as the frames of a real snapshot do.

Each side runs in its own process so its peak RSS is its own:
- ours: ``read_memory_snapshot`` (safe unpickler, tables) + ``analyze_snapshot``
  (replay, allocator block sizes, peak, live at peak) + the markdown/HTML report;
- torch: ``pickle.load`` + ``_memory_viz.segsum`` (segment summary, the same
  totals as our segments table) + ``_memory_viz.trace`` (its text replay of
  every event) + ``_memory_viz.trace_plot`` (HTML that embeds the pickle; the
  browser then does the replay).

Usage: python benchmarks/bench_memory.py [--source FILE] [--events 1000000] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import provenance, write_json

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEFAULT_SOURCE = (
    ROOT.parent / "shared/data/mem_snapshot/LINYUNLinYun__CS336-assignment2-systems__xl_ctx512_full_step_bf16.pickle"
)


def replicate(data: dict, events: int) -> dict:
    """A snapshot with about ``events`` events made of shifted copies of ``data``'s first non-empty trace."""
    dev = next(i for i, t in enumerate(data["device_traces"]) if t)
    trace = data["device_traces"][dev]
    span = trace[-1].get("time_us", 0) - trace[0].get("time_us", 0) + 1
    copies = max(1, -(-events // len(trace)))
    out_trace, out_segs = [], []
    for c in range(copies):
        off = c << 48
        out_trace += [{**e, "addr": e["addr"] + off, "time_us": e.get("time_us", 0) + c * span} for e in trace]
        for seg in data["segments"]:
            if seg.get("device", 0) == dev:
                blocks = [{**b, "address": b["address"] + off} for b in seg["blocks"]]
                out_segs.append({**seg, "address": seg["address"] + off, "blocks": blocks})
    traces = [[] for _ in data["device_traces"]]
    traces[dev] = out_trace
    return {**data, "segments": out_segs, "device_traces": traces}


def side_ours(path: Path) -> dict:
    from profiler_kit.analyze.memory import analyze_snapshot
    from profiler_kit.analyze.memory_snapshot import read_memory_snapshot

    from profiler_kit.build_memory import build_memory_report
    from profiler_kit.output import render_report_files

    t0, c0 = time.perf_counter(), time.process_time()
    snap = read_memory_snapshot(path)
    t1, c1 = time.perf_counter(), time.process_time()
    a = analyze_snapshot(snap)
    t2, c2 = time.perf_counter(), time.process_time()
    files = render_report_files(build_memory_report([("big", snap, {})]), "memory")  # analyzes again, then renders
    t3, c3 = time.perf_counter(), time.process_time()
    return {
        "read_s": t1 - t0,
        "analyze_s": t2 - t1,
        "report_s": t3 - t2,
        "parse_plus_analyze_s": t2 - t0,
        "read_cpu_s": c1 - c0,
        "analyze_cpu_s": c2 - c1,
        "report_cpu_s": c3 - c2,
        "events": len(snap.events),
        "peak_allocated_bytes": a.peak_allocated["bytes"],
        "reserved_at_dump_bytes": a.checks["reserved_at_dump_bytes"],
        "allocated_at_dump_requested_bytes": int(
            snap.blocks.loc[snap.blocks["state"] == "active_allocated", "requested_size_bytes"].sum()
        ),
        "html_bytes": len(files.get("memory.html", "")),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def side_torch(path: Path, with_trace: bool) -> dict:
    from torch.cuda import _memory_viz as mv

    t0, c0 = time.perf_counter(), time.process_time()
    with open(path, "rb") as fh:
        data = pickle.load(fh)
    t1, c1 = time.perf_counter(), time.process_time()
    seg = mv.segsum(data)
    t2, c2 = time.perf_counter(), time.process_time()
    text = mv.trace(data) if with_trace else None  # quadratic: each alloc scans every segment
    t3 = time.perf_counter()
    html = mv.trace_plot(data)
    t4 = time.perf_counter()
    line = lambda key: next(x for x in seg.splitlines() if x.startswith(key)).split(": ", 1)[1]  # noqa: E731
    return {
        "pickle_load_s": t1 - t0,
        "segsum_s": t2 - t1,
        "trace_text_s": t3 - t2 if with_trace else None,
        "trace_plot_html_s": t4 - t3,
        "load_plus_segsum_s": t2 - t0,
        "pickle_load_cpu_s": c1 - c0,
        "segsum_cpu_s": c2 - c1,
        "load_plus_segsum_plus_trace_s": t3 - t0 if with_trace else None,
        "segsum_total_reserved": line("total_reserved"),
        "segsum_total_allocated": line("total_allocated"),
        "trace_text_lines": text.count("\n") if with_trace else None,
        "trace_plot_html_bytes": len(html),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument(
        "--torch-trace-max-events", type=int, default=150_000, help="run _memory_viz.trace only up to this size"
    )
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--side", choices=["ours", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--with-trace", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        result = side_ours(args.file) if args.side == "ours" else side_torch(args.file, args.with_trace)
        print(json.dumps(result))
        return 0
    from profiler_kit.analyze.memory_snapshot import load_snapshot_dict
    from torch.cuda._memory_viz import Bytes

    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.pickle"
        t0 = time.perf_counter()
        data = replicate(load_snapshot_dict(args.source), args.events)
        with open(big, "wb") as fh:
            pickle.dump(data, fh, protocol=pickle.HIGHEST_PROTOCOL)
        del data
        build_s = time.perf_counter() - t0
        results = {}
        for side in ("ours", "torch"):
            cmd = [sys.executable, __file__, "--side", side, "--file", str(big)]
            cmd += ["--with-trace"] if side == "torch" and args.events <= args.torch_trace_max_events else []
            results[side] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        file_mib = big.stat().st_size / 2**20
    ours, torch_ = results["ours"], results["torch"]
    agree = {
        "total_reserved": torch_["segsum_total_reserved"] == repr(Bytes(ours["reserved_at_dump_bytes"])),
        "total_allocated": torch_["segsum_total_allocated"] == repr(Bytes(ours["allocated_at_dump_requested_bytes"])),
    }
    summary = {
        **provenance(),
        "source": args.source.name,
        "events": ours["events"],
        "pickle_mib": round(file_mib, 1),
        "build_s": round(build_s, 2),
        "ours": ours,
        "torch_memory_viz": torch_,
        "ratio_torch_trace_over_ours": (torch_["load_plus_segsum_plus_trace_s"] or float("nan"))
        / ours["parse_plus_analyze_s"],
        "totals_agree_with_segsum": agree,
    }
    print(f"{ours['events']:,} events, {file_mib:.0f} MiB pickle (built in {build_s:.1f} s)")
    print(
        f"ours : read {ours['read_s']:.2f} s + analyze {ours['analyze_s']:.2f} s = {ours['parse_plus_analyze_s']:.2f} s; report {ours['report_s']:.2f} s; peak RSS {ours['peak_rss_mib']:.0f} MiB"
    )
    print(
        f"ours, CPU time (what a busy VM inflates least): read {ours['read_cpu_s']:.2f} s, analyze {ours['analyze_cpu_s']:.2f} s,"
        f" report (analysis again + render) {ours['report_cpu_s']:.2f} s; torch pickle.load {torch_['pickle_load_cpu_s']:.2f} s,"
        f" segsum {torch_['segsum_cpu_s']:.2f} s"
    )
    trace = (
        f" + trace {torch_['trace_text_s']:.2f} s = {torch_['load_plus_segsum_plus_trace_s']:.2f} s"
        if torch_["trace_text_s"] is not None
        else f" = {torch_['load_plus_segsum_s']:.2f} s (trace not run above {args.torch_trace_max_events:,} events)"
    )
    print(
        f"torch: pickle.load {torch_['pickle_load_s']:.2f} s + segsum {torch_['segsum_s']:.2f} s{trace};"
        f" trace_plot {torch_['trace_plot_html_s']:.2f} s ({torch_['trace_plot_html_bytes'] / 2**20:.0f} MiB HTML,"
        f" replayed later in the browser); peak RSS {torch_['peak_rss_mib']:.0f} MiB"
    )
    print(
        f"ratio torch (load+segsum+trace) / ours (parse+analyze): {summary['ratio_torch_trace_over_ours']:.2f};"
        f" totals agree with segsum: {agree}"
    )
    write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
