"""Recorded runs (run.json + trace) -> the sections of CS336 assignment 2's questions.

Timings come from the harness numbers in run.json; kernel questions from the
trace beside it (Kineto ``trace.json.gz`` or nsys ``trace.sqlite``), read by the
analyze readers and attributed to the fixed range names of workloads.models.
Cells that ran out of memory stay in the tables as status "oom" with no times.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from profiler_kit.analyze.breakdown import gemm_vs_elementwise, gpu_ops, summarize_categories
from profiler_kit.analyze.flops import (
    ADAMW_KERNELS_PER_TENSOR,
    adamw_bytes,
    gemm_peak_key,
    kernel_time_in_ranges,
    parameter_tensors,
    rate,
    step_flops,
)
from profiler_kit.analyze.projection import launches, project_nvtx, summarize_projection
from profiler_kit.analyze.results import CALIBRATION_FIELDS, RUN_FIELDS, read_json_fields
from profiler_kit.render.units import compact_name
from profiler_kit.report import Section, Table

SIZE_ORDER = {s: i for i, s in enumerate(["tiny", "small", "medium", "large", "xl", "2.7B"])}
PHASES = ("forward", "backward", "optimizer", "step_wall")
ATTN_RANGES = ("computing attention scores", "computing softmax", "final matmul")
SOFTMAX_FLOPS_PER_SCORE = 5  # max, subtract, exp, sum, divide (the hand-written softmax)
CALIBRATION_FILE = "calibration.json"  # as profiler_kit.run writes it
NOT_MEASURED = "not measured"
# A cell whose timed steps spread more than this ((max - min) / mean, worst phase) is flagged unstable, and no
# ratio is derived from it: one such fp32 cell (forward 10.8-307.7 ms) once gave a "bf16 speedup" of 49.
UNSTABLE_SPREAD = 0.25


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
            metas.append({**read_json_fields(f, RUN_FIELDS), "_dir": d})
    return sorted(metas, key=_order)


def _order(m: dict):
    s = m.get("spec", {})
    size = run_size(s)
    return (SIZE_ORDER.get(size, 99), size or "", s.get("precision", ""), s.get("mode", ""), s.get("ctx", 0))


def run_size(spec: dict) -> str | None:
    """The tables' size column: the LM size, or for one attention layer its implementation and shape."""
    if spec.get("workload") == "attention":
        return f"attention {spec.get('attention')} d{spec.get('d_head')} h{spec.get('heads')} b{spec.get('batch')}"
    return spec.get("size")


def _ms_to_ns(v) -> float:
    return v * 1e6 if isinstance(v, int | float) else np.nan


def _phase(meta: dict, which: str, phase: str, stat: str = "mean") -> float:
    return _ms_to_ns(((meta.get(which) or {}).get("phases") or {}).get(phase, {}).get(stat))


def _labels(meta: dict) -> dict:
    s = meta.get("spec", {})
    return {"size": run_size(s)} | {k: s.get(k) for k in ("ctx", "mode", "precision")}


def _timing_runs(metas: list[dict]) -> list[dict]:
    """One run per run_id for the timing tables, preferring a timing-only run over a profiled one."""
    best: dict[str, dict] = {}
    for m in metas:
        rid = m.get("run_id")
        if rid not in best or (best[rid].get("profiled") and not m.get("profiled")):
            best[rid] = m
    return sorted(best.values(), key=_order)


def short_kernel_name(name: str, width: int = 140) -> str:
    """A kernel name shortened to ``width`` characters for tables (full names are in the trace)."""
    return compact_name(name, width)


def timing_table(metas: list[dict]) -> pd.DataFrame:
    """Per run: mean ns of forward/backward/optimizer/step (harness, no profiler), step std, peak bytes."""
    rows = []
    for m in metas:
        row = {**_labels(m), "status": m.get("status")}
        for p in PHASES:
            row[f"{'step' if p == 'step_wall' else p}_ns"] = _phase(m, "unprofiled", p)
        row["step_std_ns"] = _phase(m, "unprofiled", "step_wall", "std")
        row["steps"] = ((m.get("unprofiled") or {}).get("phases") or {}).get("step_wall", {}).get("n")
        row["spread_frac"] = _spread(m, "unprofiled")
        row["unstable"] = bool(row["spread_frac"] > UNSTABLE_SPREAD)
        row["peak_allocated_bytes"] = m.get("max_memory_allocated_bytes")
        rows.append(row)
    return pd.DataFrame(rows)


def _spread(meta: dict, which: str) -> float:
    """The widest (max - min) / mean over the run's timed phases (NaN when none was timed)."""
    phases = (meta.get(which) or {}).get("phases") or {}
    spreads = [
        (p["max"] - p["min"]) / p["mean"]
        for p in (phases.get(name) or {} for name in PHASES)
        if all(isinstance(p.get(k), int | float) for k in ("min", "max", "mean")) and p["mean"] > 0
    ]
    return max(spreads) if spreads else np.nan


def precision_table(timing: pd.DataFrame) -> pd.DataFrame:
    """fp32 vs bf16 mean step time per (size, ctx, mode), and the bf16 speed-up (fp32 / bf16)."""
    ok = timing[timing["status"] == "ok"]
    index = ["size", "ctx", "mode"]
    wide = ok.pivot_table(index=index, columns="precision", values="step_ns", aggfunc="first")
    if not {"fp32", "bf16"} <= set(wide.columns):
        return pd.DataFrame()
    unstable = ok.pivot_table(index=index, columns="precision", values="unstable", aggfunc="any")
    out = wide[["fp32", "bf16"]].rename(columns={"fp32": "fp32_step_ns", "bf16": "bf16_step_ns"})
    out = out.dropna().reset_index()
    shaky = unstable.reindex(pd.MultiIndex.from_frame(out[index]))[["fp32", "bf16"]].fillna(False).to_numpy()
    out["unstable"] = np.where(
        shaky[:, 0] & shaky[:, 1], "both", np.where(shaky[:, 0], "fp32", np.where(shaky[:, 1], "bf16", ""))
    )
    out["bf16_speedup"] = np.where(out["unstable"] == "", out["fp32_step_ns"] / out["bf16_step_ns"], np.nan)
    return out.sort_values(["size", "mode", "ctx"], key=lambda c: c.map(SIZE_ORDER) if c.name == "size" else c)


def overhead_table(metas: list[dict]) -> pd.DataFrame:
    """Runs with a profiler: mean wall-clock step without and with it, and the overhead fraction."""
    rows = []
    for m in metas:
        if m.get("profiled") and m.get("status") == "ok":
            plain, prof = _phase(m, "unprofiled", "step_wall"), _phase(m, "profiled", "step_wall")
            # run-to-run noise of the ratio: the two means' relative standard deviations, combined
            noise = np.hypot(
                _phase(m, "unprofiled", "step_wall", "std") / plain, _phase(m, "profiled", "step_wall", "std") / prof
            )
            overhead = prof / plain - 1
            rows.append(
                {
                    **_labels(m),
                    "backend": m.get("backend"),
                    "unprofiled_step_ns": plain,
                    "profiled_step_ns": prof,
                    "overhead_frac": overhead,
                    "noise_frac": noise,
                    "verdict": _overhead_verdict(overhead, noise),
                }
            )
    return pd.DataFrame(rows)


def _overhead_verdict(overhead: float, noise: float) -> str:
    """Whether the overhead stands out of the step-to-step noise (a negative one within it is noise)."""
    if not np.isfinite(overhead):
        return ""
    if not np.isfinite(noise):
        return "no noise estimate (one step)"
    if abs(overhead) <= noise:
        return "within noise"
    return "profiler faster (outside noise: check the runs)" if overhead < 0 else "overhead"


def read_run_trace(run_dir: Path, meta: dict | None = None):
    """The run's trace through the analyze readers, or None when it has none.

    A run.json that names its record's trace (``trace``; null for backend none) picks it: a folder
    recorded again with another backend also holds the earlier record's trace, whose timings are gone.
    """
    if meta and "trace" in meta:
        names = [meta["trace"]] if meta["trace"] else []
    else:  # run.json from before ``trace``: whichever trace is there
        names = ["trace.json.gz", "trace.sqlite"]
    for path in (run_dir / n for n in names):
        if not path.exists():
            continue
        if path.suffix == ".sqlite":
            from profiler_kit.analyze.nsys_sqlite import read_nsys_sqlite

            return read_nsys_sqlite(path)
        from profiler_kit.analyze.kineto import read_kineto

        return read_kineto(path)
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


def find_calibration(meta: dict, roots=()) -> tuple[dict | None, str]:
    """The ceilings measured on this run's GPU, and where they came from ("not measured" when none).

    run.json's ``calibration`` first; else a calibration.json in the run folder
    or a parent of it, up to the deepest of ``roots`` (the paths the report was
    given) that contains the folder; without roots, only the run folder itself.
    A calibration of another device than the run's GPU is not this run's ceiling
    and is skipped.
    """
    device = (meta.get("gpu") or {}).get("name", "cpu")
    if (meta.get("calibration") or {}).get("device") == device:
        return meta["calibration"], "run.json"
    run_dir = Path(meta["_dir"]).resolve()
    stops = {r.resolve(): r for r in map(Path, roots) if r.resolve() == run_dir or r.resolve() in run_dir.parents}
    stop = max(stops, key=lambda r: len(r.parts)) if stops else run_dir
    shown = stops.get(stop, Path(meta["_dir"]))  # paths as the caller spelled them, not machine-specific
    for folder in (run_dir, *run_dir.parents):
        f = folder / CALIBRATION_FILE
        if f.is_file():
            cal = read_json_fields(f, CALIBRATION_FIELDS)
            if cal.get("device") == device:
                return cal, str(shown / f.relative_to(stop))
        if folder == stop:
            break
    return None, NOT_MEASURED


def _per_step(count: int, steps: int):
    """A count per step: an int when every step has the same number, else a float (NaN without steps)."""
    if not steps:
        return np.nan
    return int(count) // steps if count % steps == 0 else count / steps


def _gemm_peak(meta: dict, cal: dict | None) -> tuple[str, str, float]:
    """(calibration dtype key, why, TFLOP/s or NaN) of the GEMM ceiling for the run's precision."""
    spec = meta.get("spec", {})
    allow_tf32 = (meta.get("matmul") or {}).get("allow_tf32")
    key, why = gemm_peak_key(spec.get("precision", "fp32"), allow_tf32)
    peak = ((cal or {}).get("gemm") or {}).get(key, {}).get("tflops", np.nan)
    return key, why, peak


def throughput_row(trace, meta: dict, cal: dict | None, source: str) -> dict:
    """Achieved GEMM TFLOP/s, whole-step MFU and AdamW bytes/s of one traced run against its ceilings.

    GEMM kernel time is the "gemm" category launched inside the profiled
    "step" ranges (any thread: backward launches from autograd's thread), per
    step; its FLOPs are the linear layers plus QK^T and PV (cuBLAS kernels, so
    category gemm too). MFU uses the harness's unprofiled step time. AdamW
    bytes are exact operand bytes of the hand-written optimizer (analyze.flops)
    and are given only when the trace shows its 9 kernels per parameter tensor.
    """
    spec = meta.get("spec", {})
    model = meta.get("model") or {}
    ops = gpu_ops(trace)
    launched = launches(ops, trace.runtime)
    names = trace.nvtx["name"].astype(str)
    steps = trace.nvtx[names == "step"]
    key, why, peak = _gemm_peak(meta, cal)
    flops = step_flops(model, spec.get("mode", "train"))
    gemm = kernel_time_in_ranges(steps, ops, launched, ["gemm"])
    n_steps = len(steps)
    gemm_ns = gemm["kernel_ns"].sum() / n_steps if n_steps else np.nan
    step_ns = _phase(meta, "unprofiled", "step_wall")
    # QK^T and PV are cuBLAS GEMMs only in the reference attention; fused attention kernels are category attention
    gemm_flops = flops["total"] if spec.get("attention", "reference") == "reference" else flops["gemm"]
    achieved = rate(gemm_flops, gemm_ns) / 1e12
    row = {
        **_labels(meta),
        "ceilings": source,
        "peak_dtype": key,
        "model_tflop_per_step": flops["total"] / 1e12,
        "attention_matmul_flop_frac": flops["attention"] / flops["total"],
        "profiled_steps": n_steps,
        "gemm_kernels_per_step": _per_step(gemm["kernels"].sum(), n_steps),
        "gemm_tflop_per_step": gemm_flops / 1e12,
        "gemm_kernel_ns": gemm_ns,
        "gemm_tflop_per_s": achieved,
        "peak_tflop_per_s": peak,
        "gemm_of_peak_frac": achieved / peak,
        "step_ns": step_ns,
        "mfu_frac": rate(flops["total"], step_ns) / 1e12 / peak,
        "peak_note": why,
    }
    opt = trace.nvtx[names == "optimizer"]
    tensors, _ = parameter_tensors(model)
    if spec.get("mode") == "train" and not spec.get("fused_adamw") and len(opt):
        k = kernel_time_in_ranges(opt, ops, launched)
        if (k["kernels"] == ADAMW_KERNELS_PER_TENSOR * tensors).all():
            gb_s = rate(adamw_bytes(model), k["kernel_ns"].mean()) / 1e9
            copy = ((cal or {}).get("copy") or {}).get("bytes_per_s", np.nan) / 1e9
            row.update(
                adamw_gb_per_step=adamw_bytes(model) / 1e9,
                adamw_kernel_ns=k["kernel_ns"].mean(),
                adamw_gb_per_s=gb_s,
                copy_peak_gb_per_s=copy,
                adamw_of_copy_peak_frac=gb_s / copy,
            )
    return row


def mfu_table(metas: list[dict], roots=()) -> pd.DataFrame:
    """Whole-step MFU of every ok run with model shapes: model FLOPs / unprofiled step / GEMM peak."""
    rows = []
    for m in metas:
        if m.get("status") != "ok" or not m.get("model") or m.get("spec", {}).get("workload", "lm") != "lm":
            continue
        cal, source = find_calibration(m, roots)
        key, why, peak = _gemm_peak(m, cal)
        flops = step_flops(m["model"], m["spec"].get("mode", "train"))["total"]
        step_ns = _phase(m, "unprofiled", "step_wall")
        achieved = rate(flops, step_ns) / 1e12
        rows.append(
            {
                **_labels(m),
                "model_tflop_per_step": flops / 1e12,
                "step_ns": step_ns,
                "achieved_tflop_per_s": achieved,
                "peak_dtype": key,
                "peak_tflop_per_s": peak,
                "mfu_frac": achieved / peak,
                "ceilings": source,
                "peak_note": why,
            }
        )
    return pd.DataFrame(rows)


def _ceiling_text(cal_sources: list[str], assumed_fp32: bool, fp32_max_frac: float) -> list[str]:
    measured = sorted({s for s in cal_sources if s != NOT_MEASURED})
    missing = sum(s == NOT_MEASURED for s in cal_sources)
    text = [
        "FLOPs are analytic, from the recorded shapes (analyze.flops): per forward pass "
        "L*(8*T*d^2 + 6*T*d*d_ff) + 2*T*d*vocab for the linear layers and L*4*B*H*N^2*d_head for QK^T and PV "
        "(the full N x N scores: the reference attention masks, it does not skip the masked half); "
        "backward = 2x forward; train and forward_backward steps = 3x forward. "
        "GEMM TFLOP/s = those FLOPs / kernel time of category gemm in the profiled steps. "
        "MFU = model FLOPs per step / harness step time without profiler / the GEMM ceiling of the run's precision, "
        "measured on this GPU (8192^3 matmul, workloads.calibrate)."
    ]
    if measured:
        text.append(f"Ceilings from: {', '.join(measured)}.")
    if missing:
        text.append(
            f"This GPU's ceilings were not measured for {missing} run(s) (no calibration in run.json and no "
            f"{CALIBRATION_FILE} beside them): their fractions of peak are left empty "
            "(record with --calibrate, or sweep --calibrate)."
        )
    if assumed_fp32:
        text.append(
            "fp32 runs: allow_tf32 was not recorded in their run.json; PyTorch's default (off) is assumed, "
            "so they are compared with the fp32 (not TF32) ceiling."
            + (
                f" Consistent with that, no fp32 run exceeds it (highest whole-step fraction {fp32_max_frac:.1%})."
                if fp32_max_frac <= 1
                else f" An fp32 run reaches {fp32_max_frac:.1%} of it, so TF32 may have been on."
            )
            if np.isfinite(fp32_max_frac)
            else ""
        )
    text.append(
        "Bytes/s of the memory-bound categories (elementwise, memory, reduction) are not given: "
        "that needs per-kernel byte counts, which the trace does not carry. "
        "The hand-written AdamW is the exception: its bytes follow exactly from the parameter count, "
        "23 fp32 operand reads/writes per parameter element over its 9 kernels per tensor "
        "(p*=1-lr*wd; m*=b1; m+=(1-b1)g; v*=b2; v+=(1-b2)g*g; s=sqrt(v); s/=c; s+=eps; p-=a*m/s), "
        "shown only when the trace has exactly those 9 kernels per parameter tensor; "
        "it counts each kernel's operands, so L2 hits make real DRAM traffic slightly lower, and the copy "
        "ceiling (one read per write) is not the limit of read-heavy kernels: fractions near or above 100% "
        "mean the optimizer runs at this GPU's memory bandwidth."
    )
    return text


def throughput_section(throughput: list[dict], mfu: pd.DataFrame) -> Section | None:
    """The "achieved vs this GPU's ceilings" section (None when there is nothing to show)."""
    tables = []
    sources = []
    assumed = False
    if throughput:
        t = pd.DataFrame(throughput)
        sources += t["ceilings"].tolist()
        assumed |= t["peak_note"].str.startswith("allow_tf32 not recorded").any()
        tables.append(
            Table(
                "Achieved throughput vs this GPU's ceilings",
                t.drop(columns="peak_note"),
                note="Traced runs. GEMM and AdamW kernel times are per profiled step.",
                key="sweep_throughput",
            )
        )
    if len(mfu):
        sources += mfu["ceilings"].tolist()
        assumed |= mfu["peak_note"].str.startswith("allow_tf32 not recorded").any()
        tables.append(
            Table("Whole-step MFU per run (harness, no profiler)", mfu.drop(columns="peak_note"), key="sweep_mfu")
        )
    if not tables:
        return None
    fp32 = mfu[mfu["peak_dtype"] == "fp32"]["mfu_frac"] if len(mfu) else pd.Series(dtype=float)
    fp32_max = fp32.max() if fp32.notna().any() else np.nan
    return Section("Achieved throughput vs this GPU's ceilings", _ceiling_text(sources, assumed, fp32_max), tables)


TRACE_AGREEMENT = 0.10  # the traced forward span and the harness's forward time agree within this fraction


def trace_vs_harness_text(differences: pd.Series) -> str:
    """The sentence on the traced forward span against the harness's forward time (``trace_vs_harness_frac``
    per run; NaN where a run lacks either, as a CPU run without a forward range does: never "nan%")."""
    worst = differences.abs().max()
    said = (
        f"largest difference {worst:.1%} ({'within' if worst <= TRACE_AGREEMENT else 'outside'} {TRACE_AGREEMENT:.0%})."
        if np.isfinite(worst)
        else "no run has both a traced forward range and a harness forward time to compare."
    )
    return "Forward GPU span in the trace vs the harness's forward time of the same profiled steps: " + said


def build_sweep_sections(run_dirs, roots=()) -> list[Section]:
    """Sections answering CS336 assignment 2 from recorded run folders (each with run.json, maybe a trace).

    ``roots`` are the paths the report was given: calibration.json files are
    looked up from each run folder up to them (see ``find_calibration``).
    """
    metas = load_runs(run_dirs)
    if not metas:
        return []
    timing = timing_table(_timing_runs(metas))
    oom = timing[timing["status"] == "oom"]
    sections = [
        Section(
            "Step time per size and context",
            [
                f"{len(timing)} run{'s' * (len(timing) != 1)}, {len(oom)} out of memory"
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
            Section(
                "fp32 vs bf16",
                [
                    "bf16_speedup = fp32 step / bf16 step (autocast); none is given where a cell's timed steps spread "
                    f"over {UNSTABLE_SPREAD:.0%} ((max - min) / mean, worst phase; the `unstable` column names it)."
                ],
                [Table("fp32 vs bf16", prec)],
            )
        )
    over = overhead_table(metas)
    if len(over):
        sections.append(
            Section(
                "Profiling overhead",
                [
                    "Mean wall-clock step of the same warm workload without and with the profiler. noise_frac combines "
                    "the two means' relative standard deviations over their steps; an overhead within it (negative "
                    "ones included) is run-to-run noise, not a cost or a gain."
                ],
                [Table("Profiled vs unprofiled step time", over)],
            )
        )
    kernel_rows, throughput = [], []
    for m in metas:
        if m.get("status") != "ok":
            continue
        trace = read_run_trace(m["_dir"], m)
        if trace is not None:
            kernel_rows.append(summarize_run_trace(trace, m))
            if m.get("model") and m.get("spec", {}).get("workload", "lm") == "lm":
                throughput.append(throughput_row(trace, m, *find_calibration(m, roots)))
    if kernel_rows:
        k = pd.DataFrame(kernel_rows)
        text = [trace_vs_harness_text(k["trace_vs_harness_frac"])] if "trace_vs_harness_frac" in k else []
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
    ceilings = throughput_section(throughput, mfu_table(_timing_runs(metas), roots))
    if ceilings is not None:
        sections.append(ceilings)
    return sections
