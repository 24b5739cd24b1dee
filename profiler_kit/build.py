"""Analysis results -> Report: what the ``report`` command says about traces.

Every number here comes from the analyses in ``analyze.breakdown``; this module
only chooses which tables and charts to show and words the findings.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from profiler_kit.analyze.breakdown import TABLES, gemm_vs_elementwise
from profiler_kit.analyze.range_groups import (
    fold_phase_rows,
    fold_range_kernels,
    group_numbered_ranges,
    numbered_members,
)
from profiler_kit.build_findings import (
    cross_rank_sections,
    diagnose,
    findings_section,
    findings_text,
    sequences_job,
)
from profiler_kit.render.units import compact_name, compact_names
from profiler_kit.report import Figure, Report, Section, Table

MAX_PHASE_SECTIONS = 8
RANGES_WITH_KERNELS, KERNELS_PER_RANGE = 12, 3  # the "Top kernels inside each range" table
# Summary columns shown where a kernel ran in a CUDA graph
GRAPH_COLUMNS = ("graph_kernels", "graph_launches", "graph_time_ns", "graph_time_frac")
# The analysis tables a report shows, plus the GPU ops for its per-rank table: all but the per-pair and
# per-instance tables and the ungrouped range kernels (analyze_trace skips those).
# The report counts range names (range_names) instead of summing every range per name a second time ("ranges",
# ungrouped: 0.05 s of CPU on the 150-copy export, benchmarks/README.md "Report speed"): it shows the grouped table.
REPORT_TABLES = tuple(t for t in TABLES if t not in ("attributed", "projection", "range_kernels", "ranges"))


@dataclass
class TraceResult:
    """One analysed trace: a label for tables, its source and its analysis tables."""

    label: str
    source: str
    meta: dict
    tables: dict[str, pd.DataFrame]
    section: Section | None = None  # its part of the report (trace_section), when built beside its reading


def _pct(x: float) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{100 * x:.1f}%"


def findings(res: TraceResult) -> list[str]:
    """Plain-language answers computed from the tables (no figure is typed in)."""
    summary = res.tables["summary"].iloc[0]
    cats = res.tables["categories"]
    kernels = res.tables["kernels"]
    out = []
    if summary["kernels"] == 0:
        out.append(
            "This profile holds no GPU kernels (CPU-only run, or CUDA tracing was off or unsupported), "
            "so GPU-time questions cannot be answered from it."
        )
        return out
    top = kernels.iloc[0]
    out.append(
        f"The kernel with the most GPU time is `{_short(top['kernel'])}` ({top['category']}): "
        f"{top['total_ns'] / 1e6:.3f} ms over {int(top['count'])} launches, {_pct(top['share_frac'])} of kernel time."
    )
    ge = gemm_vs_elementwise(cats)
    out.append(
        f"GEMM kernels take {_pct(ge['gemm_frac'])} of GPU operation time and elementwise kernels {_pct(ge['elementwise_frac'])}."
    )
    other = cats.set_index("category").loc["other", "share_frac"]
    out.append(f"Kernels no taxonomy rule matched ('other'): {_pct(other)} of GPU operation time.")
    busy = summary["gpu_busy_frac"]
    out.append(f"The GPU was busy {_pct(busy)} of the time between its first and last operation.")
    graphs = _graph_finding(summary)
    if graphs:
        out.append(graphs)
    unlaunched = _ops_without_launch(summary)
    if unlaunched and summary["nvtx_ranges"]:
        out.append(
            f"{unlaunched} of {int(summary['kernels'] + summary['memops'])} GPU operations have no launching CPU call "
            "in this trace (CUDA runtime events not recorded, or trimmed), so NVTX ranges cannot claim them."
        )
    return out


def _graph_finding(summary: pd.Series) -> str:
    """What the trace says of CUDA graphs ("" when no kernel ran in one)."""
    in_graphs = int(summary.get("graph_kernels", 0))
    if not in_graphs:
        return ""
    whole = int(summary["graph_launches"])
    parts = []
    if in_graphs > whole:
        parts.append(f"{in_graphs - whole} kernels launched inside graphs")
    if whole:
        parts.append(
            f"{whole} graph launches traced whole, each counted as one GPU operation `[CUDA graph N]`: the kernels "
            "inside them are not in this trace (nsys --cuda-graph-trace=graph; trace with --cuda-graph-trace=node "
            "to see them)"
        )
    return (
        f"GPU time in CUDA graphs: {summary['graph_time_ns'] / 1e6:.3f} ms, {_pct(summary['graph_time_frac'])} of kernel "
        f"time ({'; '.join(parts)})."
    )


def _ops_without_launch(summary: pd.Series) -> int:
    """GPU operations that no runtime call in the trace launched (0 when unknown)."""
    launched = int(summary.get("launched_ops", -1))
    return 0 if launched < 0 else int(summary["kernels"] + summary["memops"]) - launched


def _short(name: str, width: int = 90) -> str:
    return compact_name(str(name), width)


def trace_section(res: TraceResult, top: int) -> Section:
    """The sections of the report for one trace."""
    t = res.tables
    meta = res.meta
    version = meta.get("nsys_version") or meta.get("schema_version") or ""
    kind = f"{meta.get('format', '?')} {version}".rstrip()
    sec = Section(
        res.label,
        text=[f"Source: `{res.source}` ({kind})", *findings(res), *windowed_text(meta)],
    )
    summary = t["summary"][
        [
            "gpus",
            "trace_span_ns",
            "gpu_span_ns",
            "kernels",
            "kernel_time_ns",
            "memops",
            "memop_time_ns",
            "gpu_busy_ns",
            "gpu_busy_frac",
            "nvtx_ranges",
            "launched_ops",
            *(GRAPH_COLUMNS if t["summary"].iloc[0].get("graph_kernels", 0) else ()),
        ]
    ]
    sec.tables.append(Table("Summary", summary, key=f"{res.label}_summary"))
    if t["summary"].iloc[0]["kernels"]:
        kern = t["kernels"].head(top)[
            ["kernel", "category", "count", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "std_ns", "share_frac"]
        ]
        sec.tables.append(Table(f"Top {len(kern)} kernels by GPU time", kern, key=f"{res.label}_top_kernels"))
        cats = t["categories"][t["categories"]["count"] > 0]
        sec.tables.append(
            Table(
                "GPU time by category",
                cats,
                note="Kernels plus memcpy/memset; categories from analyze/taxonomy.py KERNEL_RULES.",
                key=f"{res.label}_categories",
            )
        )
        other = t["kernels"][t["kernels"]["category"] == "other"].head(10)
        if len(other):
            sec.tables.append(
                Table(
                    "Costliest kernels no rule matched",
                    other[["kernel", "count", "total_ns", "share_frac"]],
                    key=f"{res.label}_unmatched",
                )
            )
        sec.figures.append(
            Figure(
                "Top kernels by GPU time",
                kern.assign(kernel=compact_names(kern["kernel"].tolist(), 90)),  # one bar per kernel
                "bar",
                x="kernel",
                y="total_ns",
                orientation="h",
                key=f"{res.label}_top_kernels",
            )
        )
    memops = t.get("memops")
    if memops is not None and len(memops):
        sec.tables.append(
            Table(
                "Memory operations",
                memops,
                note="memcpy by direction and memset, as nsys stats gpumemtimesum (time) and gpumemsizesum (bytes); "
                "bandwidth is total bytes over total time; std is the sample standard deviation.",
                key=f"{res.label}_memops",
            )
        )
    api = t.get("api")
    if api is not None and len(api):
        sec.tables.append(
            Table(
                f"Top {min(top, len(api))} CUDA API functions by CPU time",
                api.head(top),
                note="Runtime and driver calls on the CPU, as nsys stats cudaapisum; share is of all API call time.",
                key=f"{res.label}_api",
            )
        )
    if t["range_names"]["range"].notna().any():
        sec.sections.append(ranges_section(res, top))
    if "ranks" in t and len(t["ranks"]) > 1:
        sec.sections.append(ranks_section(res))
    if "memory_counters" in t:
        sec.sections.append(memory_counters_section(res))
    why = findings_section(res.label, t) if "findings" in t else None
    sec.text[1:1], sec.sections[:0] = findings_text(t), [why] if why is not None and why.tables else []
    return sec


def windowed_text(meta: dict) -> list[str]:
    """The sentence of a trace read in time windows (``analyze.windows``), naming what it leaves out."""
    if "windows" not in meta:
        return []
    from profiler_kit.analyze.windowing import windowed_note

    return [windowed_note(meta["windows"])]


def ranks_section(res: TraceResult) -> Section:
    """Several processes launched kernels (a multi-rank export): time per rank."""
    ranks = res.tables["ranks"]
    cols = ["rank", "pid", "device_id", "kernels", "comm_kernel_sum_ns", "compute_kernel_sum_ns", "span_ns",
            "comm_ns", "compute_ns", "idle_ns", "exposed_comm_ns", "comm_hidden_frac", "idle_frac"]  # fmt: skip
    slow = ranks.loc[ranks["busy_ns"].idxmax()]
    return Section(
        "Ranks",
        text=[
            f"{len(ranks)} processes launched kernels. Communication (NCCL) and compute time are interval unions per rank; "
            "'hidden' is communication that ran while a compute kernel ran on the same rank.",
            f"Rank {int(slow['rank'])} (pid {int(slow['pid'])}) kept its GPU busy longest: {slow['busy_ns'] / 1e6:.3f} ms.",
        ],
        tables=[Table("GPU time per rank", ranks[cols], key=f"{res.label}_ranks")],
    )


SPREAD_COLUMNS = ["members", "member_cpu_min_ns", "member_cpu_median_ns", "member_cpu_max_ns"]


def ranges_section(res: TraceResult, top: int) -> Section:
    ranges = res.tables["range_groups"]
    cols = [
        "range",
        "instances",
        "cpu_total_ns",
        "cpu_avg_ns",
        "cpu_med_ns",
        "cpu_std_ns",
        "projected_instances",
        "gpu_span_avg_ns",
        "kernels",
        "kernel_time_ns",
    ]
    frac_cols = [c for c in ranges.columns if c.endswith("_frac")]
    summary = res.tables["summary"].iloc[0]
    no_launches = summary["kernels"] > 0 and summary.get("launched_ops", -1) == 0
    folded = group_numbered_ranges(ranges)
    if no_launches:  # nothing could be projected: blank GPU columns say "unknown", zeros would say "none"
        folded = folded[folded["range"].notna()].assign(
            **{c: np.nan for c in ["projected_instances", "gpu_span_avg_ns", "kernels", "kernel_time_ns"]}
        )
    n_names = int(res.tables["range_names"]["range"].notna().sum())
    named = ranges["range"].notna().to_numpy()
    grouped = f" ({n_names} before grouping emit_nvtx op ranges by op name)" if n_names != named.sum() else ""
    outside = ranges[~named]
    numbered = folded[folded["members"] > 1]
    fold_text = (
        [
            f"{int(numbered['members'].sum())} names that differ only in a number are shown as {len(numbered)} "
            f"row{'s' * (len(numbered) > 1)} ({', '.join(numbered['range'].head(3))}"
            f"{', ...' if len(numbered) > 3 else ''}): their totals summed, with the smallest, median and largest CPU "
            "total of their members."
        ]
        if len(numbered)
        else []
    )
    sec = Section(
        "NVTX ranges",
        text=[
            f"{int(named.sum())} distinct range names{grouped}, {int(ranges['instances'].sum())} instances. "
            "CPU time is the range's own duration (median and sample standard deviation as nsys stats nvtxsum); GPU "
            "span runs from the first to the last GPU operation launched inside it; kernels and kernel time count the "
            "kernels launched inside it on the range's thread, each once per range name (a kernel counts under every "
            "enclosing range of other names, as nsys nvtxkernsum counts it).",
            *fold_text,
            *(
                [
                    f"The row without a name holds the {int(outside['kernels'].iloc[0])} kernels "
                    f"({outside['kernel_time_ns'].iloc[0] / 1e6:.3f} ms) launched outside every range, as nvtxkernsum's "
                    "unnamed range."
                ]
                if len(outside) and not no_launches
                else []
            ),
            *(
                [
                    "This trace records no CUDA runtime calls, so no GPU operation can be tied to a range: "
                    "the GPU columns are left empty."
                ]
                if no_launches
                else []
            ),
        ],
    )
    rows = max(top * 2, 30)
    unnamed = folded["range"].isna().to_numpy()
    table = folded[(folded.index < rows - 1) | unnamed] if unnamed[rows:].any() else folded.head(rows)
    shown = [*cols, *(SPREAD_COLUMNS if len(numbered) else []), *frac_cols]
    sec.tables.append(Table("Ranges by CPU time", table[shown], key=f"{res.label}_ranges"))
    if len(numbered):
        members = numbered_members(ranges)
        unknown = {"projected_instances", *(("gpu_span_avg_ns", "kernels", "kernel_time_ns") if no_launches else ())}
        member_cols = ["pattern", *(c for c in cols if c in members and c not in unknown)]
        sec.tables.append(
            Table(
                "Members of the numbered ranges",
                members[member_cols],
                note="Each name folded into a numbered row above, by its number.",
                key=f"{res.label}_range_members",
                collapsed=True,
            )
        )
    inside = kernels_inside_ranges(res, ranges) if not no_launches else pd.DataFrame()
    if len(inside):
        sec.tables.append(
            Table(
                "Top kernels inside each range",
                inside,
                note=f"The {KERNELS_PER_RANGE} costliest kernels of the {RANGES_WITH_KERNELS} ranges with the most "
                "kernel time (phases have their own sections below); share is of the range's kernel time.",
                key=f"{res.label}_range_kernels",
            )
        )
    phases = res.tables["phases"]
    if no_launches:
        phases = phases.assign(**{c: np.nan for c in phases.columns if "kernel" in c})
    if len(phases):
        sec.sections.append(phases_section(res, phases, top))
    return sec


def kernels_inside_ranges(res: TraceResult, ranges: pd.DataFrame) -> pd.DataFrame:
    """Rows of range_group_kernels: the costliest kernels of the non-phase ranges with the most kernel time."""
    phases = set(res.tables["phases"]["range"])
    folded = group_numbered_ranges(ranges)  # layer_{n}: one range, as in the ranges table
    busiest = folded[(folded["kernels"] > 0) & ~folded["range"].isin(phases) & folded["range"].notna()]
    names = busiest.sort_values("kernel_time_ns", ascending=False, kind="stable")["range"].head(RANGES_WITH_KERNELS)
    per_range = fold_range_kernels(res.tables["range_group_kernels"], ranges).groupby(
        "range", observed=True, sort=False
    )
    parts = [per_range.get_group(n).head(KERNELS_PER_RANGE) for n in names if n in per_range.groups]
    cols = ["range", "kernel", "category", "count", "total_ns", "share_frac"]
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


def phases_section(res: TraceResult, phases: pd.DataFrame, top: int) -> Section:
    """Forward / backward / optimizer / step ranges, with kernels launched by any thread while each was open."""
    text = [
        "Per instance of each phase range. 'kernel' columns count kernels launched on the range's own thread "
        "(nsys's projection); 'window' columns count kernels launched by any thread of the process while the range "
        "was open. The category split and top kernels below use the window view."
    ]
    # numbered phases ("Warm-up Step 1" ... "5"): one row, one bar and one section per pattern
    folded = fold_phase_rows(phases)
    if (folded["members"] > 1).any():
        text.append(
            "Phases whose names differ only in a number are shown as one ({}): instances summed, per-instance "
            "figures averaged over all of them.".format(", ".join(folded.loc[folded["members"] > 1, "range"]))
        )
        phases = folded
    else:
        phases = folded.drop(columns="members")
    missed = phases[phases["window_kernel_per_instance_ns"] > 1.1 * phases["kernel_per_instance_ns"]]
    for _, row in missed.iterrows():
        text.append(
            f"'{row['range']}': {row['window_kernel_per_instance_ns'] / 1e6:.3f} ms of kernels were launched while it "
            f"was open but only {row['kernel_per_instance_ns'] / 1e6:.3f} ms from its own thread: its work is launched "
            "by another thread (autograd runs backward on its own thread), so its nsys projection under-reports it."
        )
    sec = Section("Phases", text=text)
    sec.tables.append(Table("Phase ranges per instance", phases, key=f"{res.label}_phases"))
    names = phases.head(MAX_PHASE_SECTIONS)["range"]
    all_cats = res.tables["phase_categories"]
    cats = group_numbered_ranges(all_cats) if "members" in phases else all_cats
    cats = cats[cats["range"].isin(names) & (cats["kernels"] > 0)]
    frac_cols = [c for c in cats.columns if c.endswith("_frac")]
    if len(cats):
        long = cats.melt(id_vars="range", value_vars=frac_cols, var_name="category", value_name="share_frac")
        long["category"] = long["category"].str.removesuffix("_frac")
        sec.figures.append(
            Figure(
                "Kernel time by category per phase",
                long,
                "stacked_bar",
                x="range",
                y="share_frac",
                color="category",
                key=f"{res.label}_phase_categories",
            )
        )
        sec.tables.append(
            Table(
                "Kernel time by category per phase",
                cats[["range", "kernel_time_ns", *frac_cols]],
                key=f"{res.label}_phase_categories",
            )
        )
    pk = (
        fold_range_kernels(res.tables["phase_kernels"], all_cats)
        if "members" in phases
        else res.tables["phase_kernels"]
    )
    for name, row in phases.head(MAX_PHASE_SECTIONS).set_index("range").iterrows():
        inside = pk[pk["range"] == name].head(top)
        if inside.empty:
            continue
        inside = inside.assign(per_instance=inside["count"] / row["instances"])
        sub = Section(f"Top kernels in '{name}'")
        sub.tables.append(
            Table(
                f"Top kernels in '{name}'",
                inside[["kernel", "category", "count", "per_instance", "total_ns", "share_frac"]],
                key=f"{res.label}_{name}_kernels",
            )
        )
        sec.sections.append(sub)
    return sec


def comparison_section(results: list[TraceResult]) -> Section:
    """Side-by-side figures of several traces."""
    rows, cat_rows = [], []
    for res in results:
        s = res.tables["summary"].iloc[0]
        cats = res.tables["categories"]
        ge = gemm_vs_elementwise(cats)
        top = res.tables["kernels"].iloc[0]["kernel"] if len(res.tables["kernels"]) else ""
        other = cats.set_index("category").loc["other", "share_frac"]
        rows.append(
            {
                "trace": res.label,
                "gpus": s["gpus"],
                "kernels": s["kernels"],
                "kernel_time_ns": s["kernel_time_ns"],
                "gpu_busy_ns": s["gpu_busy_ns"],
                "gemm_frac": ge["gemm_frac"],
                "elementwise_frac": ge["elementwise_frac"],
                "other_frac": other,
                "top_kernel": _short(top, 60),
            }
        )
        cat_rows.append(cats.assign(trace=res.label))
    table = pd.DataFrame(rows)
    cats = pd.concat(cat_rows, ignore_index=True)
    wide = cats.pivot_table(
        index="trace", columns="category", values="share_frac", observed=True, sort=False
    ).reset_index()
    wide.columns = ["trace", *[f"{c}_frac" for c in wide.columns[1:]]]
    sec = Section("Comparison across traces")
    sec.tables.append(Table("Overview", table, key="comparison_overview"))
    sec.tables.append(Table("Share of GPU time by category", wide.fillna(0), key="comparison_categories"))
    sec.figures.append(
        Figure(
            "GPU time by category per trace",
            cats[cats["total_ns"] > 0],
            "stacked_bar",
            x="trace",
            y="total_ns",
            color="category",
            key="comparison_categories",
        )
    )
    return sec


def skipped_section(skipped) -> Section:
    """The inputs a report leaves out (``analyze.sources.Skipped`` rows), first, so no reader misses them."""
    rows = pd.DataFrame([(s.path, s.reason) for s in skipped], columns=["input", "reason"])
    return Section(
        "Skipped inputs",
        text=[f"{len(rows)} input(s) could not be read; nothing below comes from them."],
        tables=[
            Table(
                "Skipped inputs",
                rows,
                note="Long reasons are cut here; the lines on stderr and --format csv/json give them whole.",
                key="skipped_inputs",
            )
        ],
    )


def build_report(
    results: list[TraceResult],
    title: str = "profiler-kit report",
    top: int = 15,
    extra: list[Section] | None = None,
    skipped=(),
) -> Report:
    """The report over one or several analysed traces (plus any extra sections, and the inputs ``skipped``)."""
    report = Report(
        title,
        text=[
            f"{len(results)} trace(s). Times in ms unless noted; shares in %. Kernel totals, NVTX projections, CUDA API "
            "calls and memory operations follow nsys stats (gpukernsum, nvtxsum, nvtxkernsum, nvtxgpuproj, cudaapisum, "
            "gpumemtimesum, gpumemsizesum) definitions; std is the sample standard deviation, as theirs."
        ],
    )
    if skipped:
        report.sections.append(skipped_section(skipped))
    if len(results) > 1:
        report.sections.append(comparison_section(results))
    report.sections.extend(r.section or trace_section(r, top) for r in results)
    report.sections.extend(cross_rank_sections(results))  # profiler_kit/build_findings.py
    report.sections.extend(extra or [])
    return report


def label_for(path, roots) -> str:
    """A short unique label: the path relative to the argument it was found under."""
    from pathlib import Path

    path = Path(path)
    for root in roots:
        root = Path(root)
        if root.is_dir() and path.is_relative_to(root):
            rel = path.relative_to(root)
            return str(rel) if len(rel.parts) > 1 else path.name
    return path.name


def memory_counter_tables(trace) -> dict[str, pd.DataFrame]:
    """The allocator counters' peaks and timeline, times from the trace's first event."""
    from profiler_kit.analyze.memory_counters import memory_counter_timeline, summarize_memory_counters, trace_start_ns

    counters = trace.memory_counters
    start = trace_start_ns(
        [trace.kernels, trace.runtime, trace.nvtx, counters], ["start_ns", "start_ns", "start_ns", "time_ns"]
    )
    return {
        "memory_counters": summarize_memory_counters(counters, start),
        "memory_counter_timeline": memory_counter_timeline(counters, start),
    }


def memory_counters_section(res: TraceResult) -> Section:
    """GPU memory from the profiler's allocator counters: peaks per device and the totals over time."""
    peaks = res.tables["memory_counters"]
    text = [
        "From the PyTorch profiler's allocator counters (`profile_memory=True`): the caching allocator's totals "
        "after each of its allocations and frees. Times are from the trace's first event. What was allocated, "
        "and by which code, needs a memory snapshot (`profiler-kit memory`)."
    ]
    for _, row in peaks.iterrows():
        text.append(
            f"cuda:{row['device_id']}: peak allocated {row['peak_allocated_bytes'] / 2**20:,.1f} MiB at "
            f"{row['peak_allocated_at_ns'] / 1e6:,.3f} ms, peak reserved {row['peak_reserved_bytes'] / 2**20:,.1f} MiB "
            f"at {row['peak_reserved_at_ns'] / 1e6:,.3f} ms ({row['events']:,} events)."
        )
    return Section(
        "GPU memory (profiler counters)",
        text=text,
        tables=[Table("Allocator peaks per device", peaks, key=f"{res.label}_memory_counters")],
        figures=[
            Figure(
                "Allocated and reserved GPU memory over time",
                res.tables["memory_counter_timeline"],
                "line",
                x="time_ns",
                y="memory_bytes",
                color="series",
                key=f"{res.label}_memory_counter_timeline",
            )
        ],
    )


def analyze_source(src, label: str, cache=None, prefetched=None, window=None) -> TraceResult:
    """Read and analyse one trace source, reduced to the small tables a report shows (raises READ_ERRORS).

    ``window`` (``analyze.windows.Windowing``): an export it applies to is read a time window at a time.
    """
    if window is not None and window.applies(src.path):
        from profiler_kit import process
        from profiler_kit.analyze.windows import analyze_windows

        process.tune_windows()

        done = analyze_windows(src.path, window.rows, window.on_window, window.scratch)
        return TraceResult(label, str(src.path), done.meta | {"windows": done.windows}, done.tables)
    from profiler_kit.analyze.heap import release_beside

    result, trace_sized = _analyze_whole(src, label, cache, prefetched)
    release_beside(trace_sized)
    return result


def _analyze_whole(src, label: str, cache=None, prefetched=None) -> tuple[TraceResult, list]:
    """``analyze_source`` of a trace read whole, and the trace-sized objects it made (the trace, its ops and their
    analysis), to be released by the caller."""
    from profiler_kit.analyze.arrays import distinct_values
    from profiler_kit.analyze.breakdown import start_analysis
    from profiler_kit.analyze.ranks import summarize_rank_time
    from profiler_kit.analyze.sources import read_trace
    from profiler_kit.analyze.tables import one_value_view

    trace = read_trace(src, details=False, cache=cache, runtime_later=True, prefetched=prefetched)
    # The diagnosis (profiler_kit/build_findings.py) shares analyze_trace's second thread: its jobs queue behind the
    # analysis' last ones, and this thread starts on them while that one finishes those (no wait in between).
    # The kernel sequences, which need only the ops, are queued as soon as those are built: this thread finds
    # them while a runtime table still being read would keep it waiting.
    early: list = []
    with ThreadPoolExecutor(max_workers=1) as pool:

        def queue_sequences(ops: pd.DataFrame) -> list:
            early.append(sequences_job(pool, trace, ops))
            return early

        analysis = start_analysis(trace, (*REPORT_TABLES, "launches"), pool, early=queue_sequences)
        ready = analysis.ready  # the ops, their summaries and their launch match, taken by the diagnosis
        summary = ready.get("summary")
        busy = int(summary["gpu_busy_ns"].iloc[0]) if summary is not None and len(ready["ops"]) else None
        diagnosis = diagnose(
            trace, ready["ops"], ready.get("categories"), ready["launches"], busy, pool=pool, sequences=early[0]
        )
        tables = analysis.tables()
    tables.pop("launches")
    tables |= diagnosis
    if len(trace.memory_counters):  # a PyTorch profiler trace recorded with profile_memory=True
        tables.update(memory_counter_tables(trace))
    ops = tables.pop("ops")  # one row per GPU op: the report keeps only the summaries
    is_kernel = ops["is_kernel"].to_numpy(dtype=bool)
    pid = ops["pid"].to_numpy()  # a view of one pid: one process (no copy of ops otherwise)
    if not one_value_view(pid) and len(distinct_values(pid[is_kernel])) > 1:  # several processes launched kernels
        tables["ranks"] = summarize_rank_time(ops[is_kernel])
    return TraceResult(label, str(src.path), _small_meta(trace.meta), tables), [trace, ops, analysis]


def _small_meta(meta: dict) -> dict:
    """The trace's metadata less its trace-sized tables (a Kineto trace's CPU ops and their ranges, which the
    diagnosis above has used): 0.7-0.9 MiB of a Kineto result's 1.0-1.9 MiB pickled, gathered for nothing."""
    return {k: v for k, v in meta.items() if not isinstance(v, pd.DataFrame | np.ndarray)}


def analyze_item(
    item: tuple, cache=None, prefetched=None, top: int | None = None, markdown: bool = False, window=None
) -> TraceResult:
    """``analyze_source`` of one (source, label) pair: a task of ``analyze_sources``. With ``top``, its section
    of the report is built there too, and with ``markdown`` rendered: on Dask, in parallel. The client's serial
    share of a markdown report of 32 shared captures was 0.20 CPU-s per trace (0.10 building, 0.10 rendering),
    3 ms with both done here (benchmarks/bench_workers.py --reduce). ``window``: as ``analyze_source``'s."""
    res = analyze_source(*item, cache=cache, prefetched=prefetched, window=window)
    return _with_section(res, top, markdown)


def _with_section(res: TraceResult, top: int | None, markdown: bool) -> TraceResult:
    if top is not None:
        res.section = trace_section(res, top)
        if markdown:
            from profiler_kit.render.markdown import prerender

            prerender(res.section)
    return res


WINDOW_TASK_RETRIES = 2  # a window task that fails (its worker lost) is run again this often before its export fails


def windowed_on_dask(item: tuple, session, window, top: int | None = None, markdown: bool = False) -> TraceResult:
    """One export read in time windows, its windows tasks of ``session`` (``analyze.window_tasks``); this
    process makes the first pass and merges. A window that still fails after its retries fails the export
    (raised: READ_ERRORS), naming the window."""
    from profiler_kit import process
    from profiler_kit.analyze.window_tasks import analyze_window_tasks

    src, label = item
    process.tune_windows()

    def run(fn, jobs, on_done):
        here = functools.partial(_window_here, fn)
        return session.map(fn, jobs, local=here, key=str, on_done=on_done, retries=WINDOW_TASK_RETRIES)

    done = analyze_window_tasks(src.path, run, window.rows, window.on_window, window.scratch)
    res = TraceResult(label, str(src.path), done.meta | {"windows": done.windows}, done.tables)
    return _with_section(res, top, markdown)


def analyze_sources(
    sources,
    roots,
    on_each=None,
    cache=None,
    skip=None,
    session=None,
    prefetched=None,
    window=None,
    top: int | None = None,
    markdown: bool = False,
) -> list[TraceResult]:
    """Read and analyse every trace source; ``on_each`` is called after each (for progress).

    ``cache``, an ``analyze.trace_cache.CacheWriter``, keeps big exports' tables beside them for the next report.
    ``skip(path, error)``, when given, takes each source that cannot be read, which is left out
    (``analyze.errors.READ_ERRORS``); without it the first such error is raised. ``session``, a
    ``profiler_kit.parallel.Session``, says where the work runs (default: in this process); on Dask each source
    is one task. The results are the same, in the order of ``sources``. ``prefetched``: reads started early
    (``analyze.nsys_prefetch.Prefetch``), taken by the reader of their export (in this process only). ``top``:
    each trace's section of the report built beside its reading, for ``build_report`` with that ``top``
    (``markdown``: and its tables rendered, for a markdown report). ``window``
    (``analyze.windows.Windowing``): which exports are read in time windows (its progress callback runs in this
    process only).
    """
    from profiler_kit.parallel import Session

    items = [(src, label_for(src.path, roots)) for src in sources]
    done = (lambda item: on_each(item[0])) if on_each else None
    session = session or Session()
    if window is not None and session.on_dask:
        return _windows_as_tasks(items, session, window, done, skip, cache, prefetched, top, markdown)
    return session.map_reading(
        functools.partial(analyze_item, top=top, markdown=markdown, window=window),
        items,
        cache=cache,
        prefetched=prefetched,
        key=_path,
        on_done=done,
        skip=skip,
    )


def _window_here(fn, job):
    """A window task that this process runs (it shares the windows with the local cluster): as on a worker,
    retried, then one line naming the window."""
    from profiler_kit.analyze.errors import READ_ERRORS, InputError

    tries = 0
    while True:
        try:
            return fn(job)
        except READ_ERRORS:
            raise
        except Exception as err:
            tries += 1
            if tries > WINDOW_TASK_RETRIES:
                raise InputError(f"{job}: its task failed: {type(err).__name__}: {err}") from None


def _windows_as_tasks(items, session, window, done, skip, cache, prefetched, top, markdown) -> list[TraceResult]:
    """``analyze_sources`` on Dask with windows wanted: each export read in windows has its windows shared out as
    tasks (``windowed_on_dask``), one export after another; then the other inputs, one task each. Results and
    skipped inputs are handed on in the inputs' order, as on the other paths."""
    from profiler_kit.analyze.errors import READ_ERRORS
    from profiler_kit.parallel import start_local_cluster

    windowed, results, failed = [], {}, {}
    for i, (src, _) in enumerate(items):
        try:
            if window.applies(src.path):
                windowed.append(i)
        except READ_ERRORS as err:  # not an export it can open: skipped, as its reading would be
            if skip is None:
                raise
            failed[i] = err
    if windowed:
        start_local_cluster(session)  # it starts while this process makes the first pass
    for i in windowed:
        try:
            results[i] = windowed_on_dask(items[i], session, window, top, markdown)
        except READ_ERRORS as err:
            if skip is None:
                raise
            failed[i] = err
            continue
        if done:
            done(items[i])
    rest = sorted(set(range(len(items))) - set(windowed) - set(failed))
    skipped: list = []
    read = session.map_reading(
        functools.partial(analyze_item, top=top, markdown=markdown),
        [items[i] for i in rest],
        cache=cache,
        prefetched=prefetched,
        key=_path,
        on_done=done,
        skip=(lambda path, err: skipped.append((path, err))) if skip else None,
    )
    for path, err in skipped:  # in the inputs' order: a path given twice stands for each of its places in turn
        failed[next(i for i in rest if _path(items[i]) == path and i not in failed)] = err
    results.update(zip([i for i in rest if i not in failed], read, strict=True))  # read: the others, in order
    out = []
    for i in range(len(items)):
        if i in failed:
            skip(_path(items[i]), failed[i])
        elif i in results:
            out.append(results[i])
    return out


def _path(item):
    return item[0].path
