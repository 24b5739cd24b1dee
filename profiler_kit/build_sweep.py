"""Recorded runs (run.json + trace) -> the sections of FACTS.md §1's questions.

Timings come from the harness numbers in run.json; kernel questions from the
trace beside it (Kineto ``trace.json.gz`` or nsys ``trace.sqlite``), read by the
analyze readers and attributed to the fixed range names of workloads.models.
Cells that ran out of memory stay in the tables as status "oom" with no times.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from analyze.breakdown import gemm_vs_elementwise, gpu_ops, summarize_categories
from analyze.projection import launches, project_nvtx, summarize_projection
from profiler_kit.report import Section, Table

SIZE_ORDER = {s: i for i, s in enumerate(["tiny", "small", "medium", "large", "xl", "2.7B"])}
PHASES = ("forward", "backward", "optimizer", "step_wall")
ATTN_RANGES = ("computing attention scores", "computing softmax", "final matmul")
SOFTMAX_FLOPS_PER_SCORE = 5  # max, subtract, exp, sum, divide (the hand-written softmax)


def find_run_dirs(paths) -> list[Path]:
    """Run folders (holding a run.json written by record/sweep) under the given paths, sorted."""
    found = set()
    for p in map(Path, paths):
        if p.is_dir():
            found.update(f.parent for f in p.rglob("run.json"))
        elif p.name == "run.json":
            found.add(p.parent)
    return sorted(found)


def load_runs(run_dirs) -> list[dict]:
    """run.json of each folder, with ``_dir``; sorted by size, precision, mode, context."""
    metas = []
    for d in map(Path, run_dirs):
        f = d / "run.json"
        if f.exists():
            metas.append({**json.loads(f.read_text()), "_dir": d})
    return sorted(metas, key=_order)


def _order(m: dict):
    s = m.get("spec", {})
    return (SIZE_ORDER.get(s.get("size"), 99), s.get("precision", ""), s.get("mode", ""), s.get("ctx", 0))


def _ms_to_ns(v) -> float:
    return v * 1e6 if isinstance(v, int | float) else np.nan


def _phase(meta: dict, which: str, phase: str, stat: str = "mean") -> float:
    return _ms_to_ns(((meta.get(which) or {}).get("phases") or {}).get(phase, {}).get(stat))


def _labels(meta: dict) -> dict:
    s = meta.get("spec", {})
    return {k: s.get(k) for k in ("size", "ctx", "mode", "precision")}


def _timing_runs(metas: list[dict]) -> list[dict]:
    """One run per run_id for the timing tables, preferring a timing-only run over a profiled one."""
    best: dict[str, dict] = {}
    for m in metas:
        rid = m.get("run_id")
        if rid not in best or (best[rid].get("profiled") and not m.get("profiled")):
            best[rid] = m
    return sorted(best.values(), key=_order)


def short_kernel_name(name: str, width: int = 140) -> str:
    """A kernel name cut to ``width`` characters for tables (full names are in the trace)."""
    return name if len(name) <= width else name[: width - 1] + "…"


def timing_table(metas: list[dict]) -> pd.DataFrame:
    """Per run: mean ns of forward/backward/optimizer/step (harness, no profiler), step std, peak bytes."""
    rows = []
    for m in metas:
        row = {**_labels(m), "status": m.get("status")}
        for p in PHASES:
            row[f"{'step' if p == 'step_wall' else p}_ns"] = _phase(m, "unprofiled", p)
        row["step_std_ns"] = _phase(m, "unprofiled", "step_wall", "std")
        row["steps"] = ((m.get("unprofiled") or {}).get("phases") or {}).get("step_wall", {}).get("n")
        row["peak_allocated_bytes"] = m.get("max_memory_allocated_bytes")
        rows.append(row)
    return pd.DataFrame(rows)


def precision_table(timing: pd.DataFrame) -> pd.DataFrame:
    """fp32 vs bf16 mean step time per (size, ctx, mode), and the bf16 speed-up (fp32 / bf16)."""
    ok = timing[timing["status"] == "ok"]
    wide = ok.pivot_table(index=["size", "ctx", "mode"], columns="precision", values="step_ns", aggfunc="first")
    if not {"fp32", "bf16"} <= set(wide.columns):
        return pd.DataFrame()
    out = wide[["fp32", "bf16"]].rename(columns={"fp32": "fp32_step_ns", "bf16": "bf16_step_ns"}).reset_index()
    out["bf16_speedup"] = out["fp32_step_ns"] / out["bf16_step_ns"]
    out = out.dropna(subset=["bf16_speedup"])
    return out.sort_values(["size", "mode", "ctx"], key=lambda c: c.map(SIZE_ORDER) if c.name == "size" else c)


def overhead_table(metas: list[dict]) -> pd.DataFrame:
    """Runs with a profiler: mean wall-clock step without and with it, and the overhead fraction."""
    rows = []
    for m in metas:
        if m.get("profiled") and m.get("status") == "ok":
            plain, prof = _phase(m, "unprofiled", "step_wall"), _phase(m, "profiled", "step_wall")
            rows.append(
                {
                    **_labels(m),
                    "backend": m.get("backend"),
                    "unprofiled_step_ns": plain,
                    "profiled_step_ns": prof,
                    "overhead_frac": prof / plain - 1,
                }
            )
    return pd.DataFrame(rows)


def read_run_trace(run_dir: Path):
    """The run's trace through the analyze readers, or None when it has none."""
    if (run_dir / "trace.json.gz").exists():
        from analyze.kineto import read_kineto

        return read_kineto(run_dir / "trace.json.gz")
    if (run_dir / "trace.sqlite").exists():
        from analyze.nsys_sqlite import read_nsys_sqlite

        return read_nsys_sqlite(run_dir / "trace.sqlite")
    return None


def summarize_run_trace(trace, meta: dict) -> dict:
    """Kernel answers for one run: top kernels, GEMM/elementwise shares, softmax vs matmul, forward time.

    Forward kernels are those launched inside "forward" ranges (main thread);
    the full step is every GPU op in the trace (the trace holds only profiled
    steps). Softmax vs matmul uses the kernels under "computing softmax" vs
    "computing attention scores" + "final matmul" (forward only); their FLOP
    ratio is 5 / (4 d_head): per score, 5 FLOP of softmax against 2 d_head each
    for QK^T and PV (masking is not counted).
    """
    ops = gpu_ops(trace)
    launched = launches(ops, trace.runtime)
    names = trace.nvtx["name"].astype(str)
    ranges = trace.nvtx[names.isin(("forward", "step", *ATTN_RANGES))].reset_index(drop=True)
    attributed = project_nvtx(ranges, ops, launched)
    rname = attributed["range"].astype(str)
    n_fwd = int((ranges["name"].astype(str) == "forward").sum())
    n_step = int((ranges["name"].astype(str) == "step").sum())
    out = {**_labels(meta), "forward_ranges": n_fwd}
    fwd = attributed[rname == "forward"]
    for label, frame, n in (("forward", fwd, n_fwd), ("step", ops, n_step)):
        kern = frame[frame["is_kernel"]]
        if kern.empty or not n:
            continue
        by = kern.groupby("name", observed=True)["duration_ns"].agg(["sum", "size"]).sort_values("sum", ascending=False)
        out[f"top_{label}_kernel"] = short_kernel_name(str(by.index[0]))
        out[f"top_{label}_kernel_per_pass"] = by["size"].iloc[0] / n
        out[f"top_{label}_kernel_frac"] = by["sum"].iloc[0] / by["sum"].sum()
        shares = gemm_vs_elementwise(summarize_categories(frame))
        out[f"{label}_gemm_frac"] = shares["gemm_frac"]
        out[f"{label}_elementwise_frac"] = shares["elementwise_frac"]
    kern_ns = attributed["duration_ns"].where(attributed["is_kernel"], 0)
    softmax = kern_ns[rname == "computing softmax"].sum()
    matmul = kern_ns[rname.isin(("computing attention scores", "final matmul"))].sum()
    out["softmax_ns"], out["attention_matmul_ns"] = int(softmax), int(matmul)
    out["softmax_to_matmul_time"] = softmax / matmul if matmul else np.nan
    d_head = (meta.get("model") or {}).get("d_head")
    out["softmax_to_matmul_flop"] = SOFTMAX_FLOPS_PER_SCORE / (4 * d_head) if d_head else np.nan
    proj = summarize_projection(ranges, attributed)
    fwd_proj = proj[proj["range"].astype(str) == "forward"]
    out["trace_forward_gpu_ns"] = fwd_proj["gpu_duration_ns"].mean() if len(fwd_proj) else np.nan
    out["trace_forward_cpu_ns"] = fwd_proj["cpu_duration_ns"].mean() if len(fwd_proj) else np.nan
    out["harness_forward_ns"] = _phase(meta, "profiled", "forward")
    out["trace_vs_harness_frac"] = out["trace_forward_gpu_ns"] / out["harness_forward_ns"] - 1
    return out


def build_sweep_sections(run_dirs) -> list[Section]:
    """Sections answering FACTS.md §1 from recorded run folders (each with run.json, maybe a trace)."""
    metas = load_runs(run_dirs)
    if not metas:
        return []
    timing = timing_table(_timing_runs(metas))
    oom = timing[timing["status"] == "oom"]
    sections = [
        Section(
            "Step time per size and context",
            [
                f"{len(timing)} runs, {len(oom)} out of memory"
                + (
                    f" ({', '.join(oom['size'] + ' ctx ' + oom['ctx'].astype(str) + ' ' + oom['mode'])})"
                    if len(oom)
                    else ""
                )
                + ". Harness means over the timed steps, without a profiler; OOM rows have no times."
            ],
            [Table("Forward, backward, optimizer and step time", timing, key="sweep_timing")],
        )
    ]
    prec = precision_table(timing)
    if len(prec):
        sections.append(
            Section("fp32 vs bf16", ["bf16_speedup = fp32 step / bf16 step (autocast)."], [Table("fp32 vs bf16", prec)])
        )
    over = overhead_table(metas)
    if len(over):
        sections.append(
            Section(
                "Profiling overhead",
                ["Mean wall-clock step of the same warm workload without and with the profiler."],
                [Table("Profiled vs unprofiled step time", over)],
            )
        )
    kernel_rows = []
    for m in metas:
        if m.get("status") != "ok":
            continue
        trace = read_run_trace(m["_dir"])
        if trace is not None:
            kernel_rows.append(summarize_run_trace(trace, m))
    if kernel_rows:
        k = pd.DataFrame(kernel_rows)
        text = []
        if "trace_vs_harness_frac" in k:
            worst = k["trace_vs_harness_frac"].abs().max()
            text.append(
                f"Forward GPU span in the trace vs the harness's forward time of the same profiled steps: "
                f"largest difference {worst:.1%} ({'within' if worst <= 0.10 else 'outside'} 10%)."
            )
        top_cols = [c for c in k.columns if c.startswith("top_")]
        share_cols = [c for c in k.columns if c.endswith(("gemm_frac", "elementwise_frac"))]
        labels = ["size", "ctx", "mode", "precision"]
        sections.append(
            Section(
                "Kernels from the traces",
                text,
                [
                    Table("Top kernel in forward and in the full step", k[labels + top_cols]),
                    Table("GEMM vs elementwise share, forward vs full step", k[labels + share_cols]),
                    Table(
                        "Softmax vs attention matmuls: time ratio and FLOP ratio",
                        k[
                            labels
                            + ["softmax_ns", "attention_matmul_ns", "softmax_to_matmul_time", "softmax_to_matmul_flop"]
                        ],
                    ),
                    Table(
                        "Forward time: trace vs harness",
                        k[
                            labels
                            + [
                                "forward_ranges",
                                "trace_forward_gpu_ns",
                                "trace_forward_cpu_ns",
                                "harness_forward_ns",
                                "trace_vs_harness_frac",
                            ]
                        ],
                    ),
                ],
            )
        )
    return sections
