"""Where GPU time goes: summaries of kernels, categories and NVTX ranges.

All functions are pure: DataFrames in, DataFrames out. Times are ns, shares
are fractions (0..1) in ``*_frac`` columns.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from concurrent.futures import Executor, Future, ThreadPoolExecutor

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals
from profiler_kit.analyze.api import summarize_api
from profiler_kit.analyze.arrays import (
    count_distinct,
    distinct_values,
    first_appearance_codes,
    positions,
    smallest_int,
    sum_by,
    take_rows,
)
from profiler_kit.analyze.frame_memo import FrameMemo
from profiler_kit.analyze.intervals import union_length
from profiler_kit.analyze.memops import summarize_memops
from profiler_kit.analyze.projection import (
    launches,
    project_nvtx,
    range_label,
    range_label_codes,
    subset_label_codes,
    summarize_projection,
)
from profiler_kit.analyze.stats import group_stats
from profiler_kit.analyze.tables import Trace, one_value, one_value_view
from profiler_kit.analyze.taxonomy import CATEGORIES, classify_kernels, classify_memops

# A kernels row that stands for a whole CUDA graph launch (readers name it "[CUDA graph N]", CONTRACT).
GRAPH_LAUNCH_NAME = re.compile(r"^\[cuda graph", re.IGNORECASE)
PROJECTED_COLUMNS = ["start_ns", "end_ns", "duration_ns", "name", "correlation_id", "category", "is_kernel"]
OP_COLUMNS = ["start_ns", "end_ns", "duration_ns", "name", "device_id", "stream_id", "correlation_id", "pid"]


def gpu_ops(trace: Trace) -> pd.DataFrame:
    """Kernels and memcpy/memset as one classified table of GPU operations.

    Columns: OP_COLUMNS plus category, subcategory, is_kernel (bool). Kernel
    names are the demangled names, as ``nsys stats`` groups them by default.
    """
    kernels = classify_kernels(trace.kernels)
    kernels = kernels.assign(name=kernels["demangled_name"], is_kernel=True)
    memops = classify_memops(trace.memops).assign(is_kernel=False)
    parts = [p for p in (kernels, memops) if len(p)] or [kernels]
    ops = pd.DataFrame(
        {c: stacked([p[c].to_numpy() for p in parts]) for c in OP_COLUMNS if c != "name"}
        | {"is_kernel": np.concatenate([p["is_kernel"].to_numpy(dtype=bool) for p in parts])},
        copy=False,  # fresh arrays (or views of one value): skip pandas' copy into one 2-D block
    )
    ops["name"] = union_categoricals([pd.Categorical(p["name"]) for p in parts])
    ops["subcategory"] = union_categoricals([pd.Categorical(p["subcategory"]) for p in parts])
    ops["category"] = pd.Categorical.from_codes(
        np.concatenate([p["category"].cat.codes.to_numpy() for p in parts]), categories=CATEGORIES
    )
    return ops


def op_ids(trace: Trace) -> pd.DataFrame:
    """The pid and correlation id of each row of ``gpu_ops(trace)`` (all ``launches`` reads), without classifying."""
    parts = [p for p in (trace.kernels, trace.memops) if len(p)] or [trace.kernels]
    return pd.DataFrame({c: stacked([p[c].to_numpy() for p in parts]) for c in ("correlation_id", "pid")}, copy=False)


def stacked(arrays: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate(arrays)``, or a read-only view of one value when all of them hold only that value
    (one process's pid, one GPU's id): no fresh array of a million equal values. A column whose first and
    last values differ (times, ids) is concatenated without a further look."""
    filled = [a for a in arrays if len(a)]
    if filled and all(a[0] == filled[0][0] for a in filled) and all(one_value(a) for a in filled):
        return np.broadcast_to(filled[0][:1], sum(len(a) for a in filled))
    return np.concatenate(arrays)


def busy_time_ns(ops: pd.DataFrame) -> int:
    """GPU busy time: the length of the union of op intervals, per device, summed.

    Overlapping ops (several streams) count once; gaps count as idle.
    """
    device = ops["device_id"].to_numpy()
    starts, ends = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    devices = distinct_values(device)
    if len(devices) == 1:  # one GPU: no per-device copies
        return union_length(starts, ends)
    return sum(union_length(starts[device == d], ends[device == d]) for d in devices)


def distinct_names(names: pd.Series, rows: np.ndarray) -> int:
    """Distinct non-missing values of ``names`` at the ``rows`` mask, counted on category codes."""
    codes = pd.Categorical(names).codes[rows]
    return int(np.count_nonzero(np.bincount(codes[codes >= 0])))


def count_unique(values: np.ndarray) -> int:
    """Distinct non-missing values, as ``Series.nunique`` (integers have none missing: ``distinct_values``)."""
    return len(distinct_values(values)) if values.dtype.kind in "iu" else int(pd.Series(values).nunique())


def summarize_trace(trace: Trace, ops: pd.DataFrame, launched_ops: int = -1) -> pd.DataFrame:
    """One-row overview: GPUs, profiled span, kernel count and times, busy fraction, CUDA graphs.

    Span runs from the first to the last GPU op (or CPU range when no GPU op ran).
    ``launched_ops`` counts the ops matched to their launching CPU call (``len(launches(...))``):
    only those can be projected onto NVTX ranges (-1: not matched). CUDA graphs (``summarize_graphs``):
    graph_kernels, graph_launches, graph_time_ns, graph_time_frac.
    """
    is_kernel = ops["is_kernel"].to_numpy(dtype=bool)
    kernel_ns = ops["duration_ns"].to_numpy()[is_kernel]
    starts = [df["start_ns"] for df in (ops, trace.nvtx, trace.runtime) if len(df)]
    ends = [df["end_ns"] for df in (ops, trace.nvtx, trace.runtime) if len(df)]
    span = int(max(e.max() for e in ends) - min(s.min() for s in starts)) if starts else 0
    gpu_span = int(ops["end_ns"].max() - ops["start_ns"].min()) if len(ops) else 0
    busy = busy_time_ns(ops) if len(ops) else 0
    gpus = ", ".join(sorted(set(trace.gpus["name"].astype(str)))) or "none recorded"
    return pd.DataFrame(
        [
            {
                "gpus": gpus,
                "processes": count_unique(ops["pid"].to_numpy() if len(ops) else trace.nvtx["pid"].to_numpy()),
                "trace_span_ns": span,
                "gpu_span_ns": gpu_span,
                "kernels": len(kernel_ns),
                "distinct_kernels": distinct_names(ops["name"], is_kernel),
                "kernel_time_ns": int(kernel_ns.sum()),
                "memops": len(is_kernel) - len(kernel_ns),
                "memop_time_ns": int(ops["duration_ns"].to_numpy()[~is_kernel].sum()),
                "gpu_busy_ns": busy,
                "gpu_busy_frac": busy / gpu_span if gpu_span else np.nan,
                "nvtx_ranges": len(trace.nvtx),
                "launched_ops": launched_ops,
                **summarize_graphs(trace.kernels, int(kernel_ns.sum())),
            }
        ]
    )


def summarize_graphs(kernels: pd.DataFrame, kernel_time_ns: int) -> dict:
    """GPU time in CUDA graphs: the kernels rows with a graph_id (>= 0).

    graph_kernels counts them: kernels traced inside graphs (nsys ``--cuda-graph-trace=node``, Kineto) plus
    graph launches traced whole; graph_launches counts the latter (named "[CUDA graph N]", their kernels
    not in the trace); graph_time_ns sums their durations, graph_time_frac is its share of kernel time.
    """
    graph_id = kernels["graph_id"].to_numpy()
    in_graph = np.zeros(0, dtype=bool) if one_value_view(graph_id) and graph_id[0] < 0 else graph_id >= 0
    if not in_graph.any():
        return {"graph_kernels": 0, "graph_launches": 0, "graph_time_ns": 0, "graph_time_frac": 0.0}
    names = pd.Categorical(kernels["name"])
    whole = np.asarray(names.categories.str.contains(GRAPH_LAUNCH_NAME), dtype=bool)
    codes = names.codes[in_graph]
    graph_ns = int(kernels["duration_ns"].to_numpy()[in_graph].sum())
    return {
        "graph_kernels": int(in_graph.sum()),
        "graph_launches": int(np.count_nonzero(whole[codes[codes >= 0]])),
        "graph_time_ns": graph_ns,
        "graph_time_frac": graph_ns / kernel_time_ns if kernel_time_ns else np.nan,
    }


def summarize_kernels(ops: pd.DataFrame, top: int | None = None) -> pd.DataFrame:
    """Per kernel name: count, total/avg/median/min/max/std ns and share of all kernel time.

    Matches ``nsys stats --report gpukernsum`` summed over grid/block shapes (``summarize_kernel_shapes``
    splits them); ``med_ns`` and ``std_ns`` (sample standard deviation) as nsys defines them (analyze/stats.py).
    Sorted by total time, descending (ties: first launched first); ``top`` keeps the first rows.
    """
    names = pd.Categorical(ops["name"])
    # Groups listed in order of first appearance (as groupby(sort=False)). Memops and kernels without a
    # name (no group, as in groupby) share one extra key, whose group is dropped: every op is summed in
    # place, with no gathered copy of the kernels.
    other = len(names.categories)
    key = names.codes.astype(smallest_int(other))  # a copy, one byte a row for a few dozen names
    key[(key < 0) | ~ops["is_kernel"].to_numpy(dtype=bool)] = other
    group, first = first_appearance_codes(key, other + 1)
    stats = group_stats(group, ops["duration_ns"].to_numpy(), len(first))
    kept = np.flatnonzero(key[first] != other)
    index = pd.CategoricalIndex(pd.Categorical.from_codes(names.codes[first[kept]], dtype=names.dtype), name="name")
    category = pd.Categorical(ops["category"])[first[kept]]  # the first kernel's category
    out = pd.DataFrame(
        {"category": pd.Series(np.asarray(category), index=index).astype(str)}
        | {col: stats[stat][kept] for col, stat in KERNEL_STAT_COLUMNS.items()},
        index=index,
    )
    return kernel_table(out, top)


# Columns of the per-kernel tables, from group_stats' statistics
KERNEL_STAT_COLUMNS = {
    "count": "count",
    "total_ns": "total",
    "avg_ns": "avg",
    "med_ns": "med",
    "min_ns": "min",
    "max_ns": "max",
    "std_ns": "std",
}


def kernel_table(out: pd.DataFrame, top: int | None) -> pd.DataFrame:
    """Per-kernel rows (index: kernel name) with share_frac, sorted by total time then count, as a table."""
    total = out["total_ns"].sum()
    out["share_frac"] = out["total_ns"] / total if total else np.nan
    out = out.sort_values(["total_ns", "count"], ascending=False, kind="stable").reset_index(names="kernel")
    return out.head(top) if top else out


SHAPE_COLUMNS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")


def summarize_kernel_shapes(
    kernels: pd.DataFrame, name: str = "demangled_name", by_shape: bool = True, top: int | None = None
) -> pd.DataFrame:
    """Per (kernel name, grid, block): the statistics of ``summarize_kernels``, as ``nsys stats --report gpukernsum``.

    ``kernels`` is a KERNELS table read with its launch shapes (``read_trace(..., details=True)``); ``name``
    picks the name column: ``demangled_name`` (gpukernsum's default) or ``name``, the short name
    (``gpukernsum:base``). ``grid`` and ``block`` are "XxYxZ" (-1 parts: shape not recorded); without
    ``by_shape``, one row per name and no shape columns. ``category`` is the first launch's.
    """
    names = pd.Categorical(kernels[name])
    dims = list(SHAPE_COLUMNS) if by_shape else []
    shape = kernels[dims].to_numpy()
    keys = pd.DataFrame({"name": names.codes} | {c: shape[:, i] for i, c in enumerate(dims)})
    group = keys.groupby(list(keys.columns), sort=False).ngroup().to_numpy()
    n = int(group.max()) + 1 if len(group) else 0
    first = np.full(n, len(group), dtype=np.int64)
    np.minimum.at(first, group, np.arange(len(group)))
    stats = group_stats(group, kernels["duration_ns"].to_numpy(), n)
    index = pd.CategoricalIndex(names[first], name="name")
    category = classify_kernels(kernels.iloc[first])["category"].astype(str).to_numpy()
    columns = {"category": category}
    if by_shape:
        columns |= {
            "grid": ["x".join(map(str, d)) for d in shape[first, :3]],
            "block": ["x".join(map(str, d)) for d in shape[first, 3:]],
        }
    out = pd.DataFrame(columns | {col: stats[stat] for col, stat in KERNEL_STAT_COLUMNS.items()}, index=index)
    named = np.asarray(names.codes[first] >= 0)
    return kernel_table(out[named], top)


def summarize_categories(ops: pd.DataFrame) -> pd.DataFrame:
    """GPU time per category (kernels and memops): count, total ns, share of GPU op time."""
    codes = pd.Categorical(ops["category"], categories=CATEGORIES).codes
    known = codes >= 0  # a category outside CATEGORIES is not listed
    n = len(CATEGORIES)
    out = pd.DataFrame(
        {
            "count": np.bincount(codes[known], minlength=n),
            "total_ns": sum_by(codes[known], ops["duration_ns"].to_numpy()[known], n),
        },
        index=pd.Index(CATEGORIES),
    )
    total = out["total_ns"].sum()
    out["share_frac"] = out["total_ns"] / total if total else np.nan
    return out.reset_index(names="category")


def gemm_vs_elementwise(categories: pd.DataFrame) -> dict[str, float]:
    """GEMM and elementwise shares of GPU op time, and their ratio (NaN when undefined)."""
    by = categories.set_index("category")["total_ns"]
    total = by.sum()
    gemm, elem = by.get("gemm", 0), by.get("elementwise", 0)
    return {
        "gemm_frac": gemm / total if total else np.nan,
        "elementwise_frac": elem / total if total else np.nan,
        "gemm_to_elementwise": gemm / elem if elem else np.nan,
    }


EMIT_NVTX_SUFFIX = re.compile(r", (seq|op_id|sizes|input_op_ids) = .*$")


def base_range_names(labels: pd.Series) -> pd.Series:
    """Range labels without the per-call suffix ``torch.autograd.profiler.emit_nvtx`` adds.

    ``aten::mm, seq = 12, op_id = 40, sizes = [...]`` becomes ``aten::mm`` so that
    thousands of one-off names group into one row per op.
    """
    return labels.astype(str).str.replace(EMIT_NVTX_SUFFIX, "", regex=True)


def range_name_codes(ranges: pd.DataFrame, group_emit_nvtx: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of the range names: ``codes[i]`` is the name of ranges row i, ``names`` in order of first appearance.

    The same as ``pd.factorize`` of the labels (``base_range_names`` of them with
    ``group_emit_nvtx``), but each distinct label is built and matched once, not once per range.
    """
    label_codes, labels = range_label_codes(ranges)
    if group_emit_nvtx:
        labels = pd.Index(base_range_names(pd.Series(labels)))
    # Distinct label texts (two labels may share a base name), then renumbered in order of first appearance.
    text_codes, texts = pd.factorize(labels.to_numpy())
    codes, first_seen = pd.factorize(text_codes[label_codes])
    return codes, texts[first_seen]


def range_kernel_time(ranges: pd.DataFrame, attributed: pd.DataFrame) -> pd.DataFrame:
    """Per row of ``ranges`` (same index): the kernels launched inside it and their time, split by category.

    Columns kernels, kernel_time_ns and ``<category>_ns`` for each category some kernel
    falls in, in the categories' order. ``summarize_ranges`` sums these rows per range name.
    """
    n = len(ranges)
    pos = positions(ranges.index, attributed["range_row"].to_numpy())
    cats = pd.Categorical(attributed["category"])
    n_cat = len(cats.categories)
    # One slot per (range, category) plus two per range: a kernel without a category (counted in the
    # total only) and a memop (not counted). Summing every pair this way, not the kernel pairs picked
    # out first, saves three gathered copies of a million pairs.
    width = n_cat + 2
    slot = cats.codes.astype(np.int8 if n_cat + 1 <= np.iinfo(np.int8).max else np.int32)  # a copy, small
    slot[slot < 0] = n_cat
    slot[~attributed["is_kernel"].to_numpy(dtype=bool)] = n_cat + 1
    duration = attributed["duration_ns"].to_numpy()
    known = pos >= 0
    if not known.all():  # pairs of a range outside ``ranges``
        pos, slot, duration = pos[known], slot[known], duration[known]
    key = pos * width
    key += slot
    counts = np.bincount(key, minlength=n * width).reshape(n, width)[:, : n_cat + 1]
    by_cat = sum_by(key, duration, n * width).reshape(n, width)[:, : n_cat + 1]
    # a category no kernel falls in gets no column
    seen = np.flatnonzero(counts[:, :n_cat].sum(axis=0))
    columns = {"kernels": counts.sum(axis=1), "kernel_time_ns": by_cat.sum(axis=1)}
    columns.update({f"{cats.categories[j]}_ns": by_cat[:, j] for j in seen})
    return pd.DataFrame(columns, index=ranges.index)


def summarize_ranges(
    ranges: pd.DataFrame,
    attributed: pd.DataFrame,
    projection: pd.DataFrame | None = None,
    group_emit_nvtx: bool = False,
    kernel_time: pd.DataFrame | None = None,
    ops: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per range name: instances, CPU time statistics, projected GPU time, kernels and their time.

    Columns: range, instances, cpu_total_ns, cpu_avg_ns, cpu_med_ns, cpu_min_ns, cpu_max_ns,
    cpu_std_ns (all instances, as ``nvtxsum``; median and sample standard deviation as nsys
    computes them, analyze/stats.py), projected_instances, gpu_span_total_ns / gpu_span_avg_ns
    (first-to-last GPU op per instance, as ``nvtxgpuproj``), kernels and kernel_time_ns (the
    distinct kernels launched inside some instance of the name, each once however many instances
    of the name enclose it, as ``nvtxkernsum``'s Kern Inst), and one ``<category>_frac`` column
    per category of that kernel time. With ``ops`` (the GPU ops ``attributed`` was projected from),
    a last row with a missing range name holds the kernels launched outside every range, as
    ``nvtxkernsum`` lists them under an unnamed range. With ``group_emit_nvtx`` names are grouped
    by ``base_range_names``. Rows are range names in order of first appearance, then sorted by
    CPU time. ``projection`` and ``kernel_time`` (``summarize_projection`` and ``range_kernel_time``
    of the same arguments) skip recomputing them.
    """
    codes, names = range_name_codes(ranges, group_emit_nvtx)
    n = len(names)
    cpu = group_stats(codes, ranges["duration_ns"].to_numpy(), n)
    proj = summarize_projection(ranges, attributed) if projection is None else projection
    pos = positions(ranges.index, proj["range_row"].to_numpy())
    known = pos >= 0
    proj_codes = codes[pos[known]]
    gpu_span = proj["gpu_duration_ns"].to_numpy()[known].astype(np.int64)
    if same_name_overlaps(ranges, codes):  # a kernel may lie in two instances of one name: count it once
        pair_codes = codes[positions(ranges.index, attributed["range_row"].to_numpy())]
        repeats = repeated_pairs(pair_codes, attributed["op_row"].to_numpy())
        per_row = range_kernel_time(ranges, attributed[~repeats] if repeats is not None else attributed)
    else:  # each (name, kernel) pair is one (instance, kernel) pair: the per-instance sums add up
        per_row = range_kernel_time(ranges, attributed) if kernel_time is None else kernel_time
    return ranges_frame(
        names,
        cpu,
        np.bincount(proj_codes, minlength=n),
        sum_by(proj_codes, gpu_span, n),
        sum_by(codes, per_row["kernels"].to_numpy(), n),
        sum_by(codes, per_row["kernel_time_ns"].to_numpy(), n),
        {col: sum_by(codes, per_row[col].to_numpy(), n) for col in per_row.columns[2:]},
        outside_totals(outside_kernels(ops, attributed)) if ops is not None else None,
    )


def outside_totals(outside: pd.DataFrame) -> tuple[int, int, dict[str, int]]:
    """The kernels no range encloses (``outside_kernels``) as ``ranges_frame`` takes them: count, ns, ns per category."""
    cat_ns = outside.groupby("category", observed=True)["duration_ns"].sum()
    return len(outside), int(outside["duration_ns"].sum()), {str(c): int(t) for c, t in cat_ns.items()}


def ranges_frame(
    names,
    cpu: dict[str, np.ndarray],
    projected_instances: np.ndarray,
    gpu_span_total: np.ndarray,
    kernels: np.ndarray,
    kernel_time: np.ndarray,
    by_category: dict[str, np.ndarray],
    outside: tuple[int, int, dict[str, int]] | None = None,
) -> pd.DataFrame:
    """The table of ``summarize_ranges`` from its sums per range name (``names``, in order of first appearance):
    CPU time statistics (``group_stats``'), projected instances and their GPU span, kernels and their time,
    ``<category>_ns`` columns of it; ``outside`` (``outside_totals``) adds the row of kernels outside every range.
    A report read in time windows (``analyze.windows``) makes the same table from its merged sums.
    """
    n = len(names)
    out = pd.DataFrame(
        {"instances": cpu["count"], "cpu_total_ns": cpu["total"], "cpu_avg_ns": cpu["avg"]}
        | {f"cpu_{stat}_ns": cpu[stat] for stat in ("med", "min", "max", "std")},
        index=pd.Index(names, name="range"),
    )
    out["projected_instances"] = projected_instances
    out["gpu_span_total_ns"] = gpu_span_total
    out["gpu_span_avg_ns"] = out["gpu_span_total_ns"] / out["projected_instances"].replace(0, np.nan)
    out["kernels"] = kernels
    out["kernel_time_ns"] = kernel_time
    out = out.reset_index()
    if outside is not None and outside[0]:
        count, total, cat_ns = outside
        row = {"range": np.nan, "instances": 0, "cpu_total_ns": 0, "projected_instances": 0}
        row |= {"gpu_span_total_ns": 0, "kernels": count, "kernel_time_ns": total}
        out = pd.concat([out, pd.DataFrame([row])], ignore_index=True)
        by_category = {col: np.append(v, cat_ns.get(col.removesuffix("_ns"), 0)) for col, v in by_category.items()} | {
            f"{c}_ns": np.append(np.zeros(n, np.int64), t) for c, t in cat_ns.items() if f"{c}_ns" not in by_category
        }
        by_category = {f"{c}_ns": by_category[f"{c}_ns"] for c in CATEGORIES if f"{c}_ns" in by_category}
    kernel_ns = out["kernel_time_ns"].replace(0, np.nan).to_numpy()
    for col, ns in by_category.items():
        out[f"{col.removesuffix('_ns')}_frac"] = np.nan_to_num(ns / kernel_ns)
    return out.sort_values("cpu_total_ns", ascending=False, kind="stable").reset_index(drop=True)


def same_name_overlaps(ranges: pd.DataFrame, codes: np.ndarray) -> bool:
    """Whether two ranges of one name (``codes``) overlap on one thread, so that one launch may lie in both.

    Sorted by (name, thread, start), an overlap shows between neighbours: a range that overlaps a later
    one also overlaps every range starting between them. Looks at the ranges, not the (range, op) pairs.
    """
    if len(ranges) < 2:
        return False
    start, end = ranges["start_ns"].to_numpy(), ranges["end_ns"].to_numpy()
    thread = ranges["tid"].to_numpy()
    pid = ranges["pid"].to_numpy()
    order = np.lexsort((start, thread, pid, codes))
    c, t, p = codes[order], thread[order], pid[order]
    same = (c[1:] == c[:-1]) & (t[1:] == t[:-1]) & (p[1:] == p[:-1])
    return bool((same & (start[order][1:] <= end[order][:-1])).any())


def repeated_pairs(range_codes: np.ndarray, op_rows: np.ndarray) -> np.ndarray | None:
    """Mask of the (range, op) rows that repeat an earlier row's (range name code, op), or None when none does.

    Only a name nested in itself repeats one. A table of the (name, op) slots checks that in linear time
    when it is small (at most 16 bytes per row); else the keys are sorted.
    """
    if len(op_rows) == 0:
        return None
    width = int(op_rows.max()) + 1
    slots = (int(range_codes.max()) + 2) * width
    slot = range_codes.astype(np.int64)  # code -1 (no name): slot 0; built in place
    slot += 1
    slot *= width
    slot += op_rows
    if slots <= 16 * len(op_rows):
        seen = np.zeros(slots, dtype=bool)
        seen[slot] = True
        if np.count_nonzero(seen) == len(op_rows):
            return None
    order = np.argsort(slot, kind="stable")  # equal keys keep their row order: the first is the earlier row
    ordered = slot[order]
    repeat = np.zeros(len(slot), dtype=bool)
    repeat[order[1:]] = ordered[1:] == ordered[:-1]
    return repeat if repeat.any() else None


def outside_kernels(ops: pd.DataFrame, attributed: pd.DataFrame) -> pd.DataFrame:
    """The kernels of ``ops`` that no range encloses (no row of ``attributed``): name, category, duration_ns."""
    inside = np.zeros(len(ops), dtype=bool)
    inside[attributed["op_row"].to_numpy()] = True
    rows = np.flatnonzero(ops["is_kernel"].to_numpy(dtype=bool) & ~inside)
    return pd.DataFrame({c: take_rows(ops[c], rows) for c in ("name", "category", "duration_ns")})


def summarize_range_kernels(
    attributed: pd.DataFrame, group_emit_nvtx: bool = False, ops: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per (range name, kernel name): range instances, kernel count, total ns (as ``nvtxkernsum``).

    ``count`` and ``total_ns`` are of distinct kernels: a kernel under two nested ranges of one name
    counts once, in both (nsys 2022.4's Kern Inst counts it once too, but its Total Time adds it once per
    enclosing range: tests/test_nsys_parity.py wraps a range of a real export in a second one of its name). ``share_frac`` is the kernel's part of the kernel time summed in its
    range name. With ``ops`` (the GPU ops ``attributed`` was projected from), kernels launched outside
    every range come under a missing range name, with 0 range instances, as ``nvtxkernsum`` lists them.
    With ``group_emit_nvtx`` range names are grouped by ``base_range_names``.
    Rows are sorted by range name (in the ``range`` categories' order, the missing name first), then total time descending.
    """
    ranges, kernels = pd.Categorical(attributed["range"]), pd.Categorical(attributed["name"])
    if group_emit_nvtx:  # rename the categories, not the rows: one regex per distinct label
        base_codes, bases = pd.factorize(base_range_names(pd.Series(ranges.categories)).to_numpy())
        renamed = np.append(base_codes, -1).astype(ranges.codes.dtype)  # -1 stays -1; as few bytes as the codes
        ranges = pd.Categorical.from_codes(renamed[ranges.codes], categories=bases)
    # One integer per (range, kernel) pair, numbered in order of first appearance (as groupby(sort=False)).
    # Codes are -1 for a missing name, hence the + 1s. Memops (few) share one extra key, whose group is
    # dropped at the end: every pair is summed in place, with no gathered copy of the kernel pairs.
    width = len(kernels.categories) + 1
    memop_key = (len(ranges.categories) + 1) * width
    key = ranges.codes.astype(np.int64)  # built in place: each temporary would be a fresh million-row array
    key += 1
    key *= width
    key += kernels.codes
    key += 1
    key[~attributed["is_kernel"].to_numpy(dtype=bool)] = memop_key
    pair, first = first_appearance_codes(key, memop_key + 1)  # first: first row of each
    n = len(first)
    kept = np.flatnonzero(key[first] != memop_key)  # the (range, kernel) pairs
    first = first[kept]
    duration = attributed["duration_ns"].to_numpy()
    repeats = repeated_pairs(ranges.codes, attributed["op_row"].to_numpy())
    if repeats is None:
        count, total = np.bincount(pair, minlength=n), sum_by(pair, duration, n)
    else:  # a name nested in itself: its kernels' second rows count for nothing
        once = ~repeats
        count, total = np.bincount(pair[once], minlength=n), sum_by(pair[once], duration[once], n)
    out = pd.DataFrame(
        {
            "range": ranges[first],
            "kernel": kernels[first],
            "category": np.asarray(pd.Categorical(attributed["category"])[first]).astype(str),
            "range_instances": count_distinct(pair, attributed["range_row"].to_numpy(), n)[kept],
            "count": count[kept],
            "total_ns": total[kept],
        }
    )
    if ops is not None:
        out = with_outside_kernels(out, outside_kernels(ops, attributed))
    return range_kernel_frame(out)


def range_kernel_frame(out: pd.DataFrame) -> pd.DataFrame:
    """``summarize_range_kernels``' rows (range, kernel, category, range_instances, count, total_ns; pairs in order of
    first appearance, then the outside kernels) with each kernel's share of its range name, sorted as it sorts them."""
    range_codes = out["range"].cat.codes.to_numpy().astype(np.int64) + 1  # -1 (no name) gets slot 0
    range_total = np.bincount(
        range_codes, weights=out["total_ns"].to_numpy(), minlength=len(out["range"].cat.categories) + 1
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        out["share_frac"] = out["total_ns"].to_numpy() / range_total[range_codes]
    order = np.lexsort((-out["total_ns"].to_numpy(), out["range"].cat.codes.to_numpy()))
    return out.iloc[order].reset_index(drop=True)


def with_outside_kernels(pairs: pd.DataFrame, outside: pd.DataFrame) -> pd.DataFrame:
    """``pairs`` (rows of ``summarize_range_kernels``) with the ``outside`` kernels per name under the missing range name.

    Kernels under a range without a name are already there (nsys merges both): the counts add.
    """
    if outside.empty:
        return pairs
    g = outside.groupby("name", observed=True, sort=False)
    extra = pd.DataFrame(
        {
            "kernel": g.size().index.astype(object),
            "category": g["category"].first().astype(str).to_numpy(),
            "range_instances": 0,
            "count": g.size().to_numpy(),
            "total_ns": g["duration_ns"].sum().to_numpy(),
        }
    )
    return with_extra_kernels(pairs, extra)


def with_extra_kernels(pairs: pd.DataFrame, extra: pd.DataFrame) -> pd.DataFrame:
    """``with_outside_kernels`` from the outside kernels per name (kernel, category, range_instances, count, total_ns;
    names in order of first appearance)."""
    unnamed = pairs["range"].isna().to_numpy()
    if unnamed.any():
        merged = pd.concat([pairs[unnamed].assign(kernel=pairs["kernel"][unnamed].astype(object)), extra])
        extra = merged.groupby("kernel", sort=False).agg(
            category=("category", "first"), range_instances=("range_instances", "sum"),
            count=("count", "sum"), total_ns=("total_ns", "sum"),
        ).reset_index()  # fmt: skip
    rest = pairs[~unnamed]  # one row per (range name, kernel name): few enough for object arrays
    kernel = pd.Categorical(np.concatenate([rest["kernel"].astype(object).to_numpy(), extra["kernel"].to_numpy()]))
    return pd.DataFrame(
        {
            "range": pd.Categorical(
                np.concatenate([rest["range"].astype(object).to_numpy(), np.full(len(extra), np.nan, dtype=object)]),
                categories=pairs["range"].cat.categories,
            ),
            "kernel": kernel,
            "category": np.concatenate([rest["category"].to_numpy(), extra["category"].to_numpy()]),
            **{
                c: np.concatenate([rest[c].to_numpy(), extra[c].to_numpy()]).astype(np.int64)
                for c in ("range_instances", "count", "total_ns")
            },
        }
    )


# Ranges that mark training phases, by name. Not phases: emit_nvtx op ranges ("::", "op_id") and
# layer parts whose names contain a phase word ("feed forward" is the MLP of a block, not a pass).
PHASE_PATTERN = re.compile(r"forward|backward|optimi[sz]er|\bstep\b|train|warm", re.IGNORECASE)
NOT_PHASE_PATTERN = re.compile(r"::|op_id|feed[ _-]?forward", re.IGNORECASE)


def phase_ranges(ranges: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``ranges`` that mark training phases (PHASE_PATTERN, unless NOT_PHASE_PATTERN).

    Each distinct label is matched once, then its verdict is mapped onto the ranges' label codes
    (a range without a name, code -1, is no phase). Once per frame (``PHASES``: the analysis and the
    diagnosis both ask), the phase rows kept with their label codes.
    """
    return PHASES(ranges)


def _phase_ranges(ranges: pd.DataFrame) -> pd.DataFrame:
    codes, labels = range_label_codes(ranges)
    texts = pd.Series(labels)
    is_phase_label = (texts.str.contains(PHASE_PATTERN) & ~texts.str.contains(NOT_PHASE_PATTERN)).to_numpy(dtype=bool)
    is_phase = np.append(is_phase_label, False)[codes]  # code -1 picks the appended False
    phases = ranges[is_phase]
    subset_label_codes(ranges, is_phase, phases)
    return phases


PHASES = FrameMemo(_phase_ranges)


PHASE_COLUMNS = [
    "range",
    "instances",
    "cpu_avg_ns",
    "kernels_per_instance",
    "kernel_per_instance_ns",
    "window_kernels_per_instance",
    "window_kernel_per_instance_ns",
]


def summarize_phases(
    phases: pd.DataFrame, attributed: pd.DataFrame, window: pd.DataFrame, kernel_time: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per phase range name (forward, backward, optimizer, step...): CPU and kernel time per instance.

    Args:
        phases: ``phase_ranges(nvtx)``.
        attributed: ``project_nvtx`` of all ranges (launches on the range's own thread, as nsys).
        window: ``project_nvtx(phases, ..., any_thread=True)`` (launches by any thread while open).
        kernel_time: ``range_kernel_time(nvtx, attributed)`` when already computed: the phases'
            rows of it replace a pass over every pair.

    Returns:
        Columns PHASE_COLUMNS: kernels and kernel ns per instance in both views.
    """
    if phases.empty:
        return pd.DataFrame(columns=PHASE_COLUMNS)

    def per_row(att: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Kernels and their summed ns per row of ``phases``."""
        pos = positions(phases.index, att["range_row"].to_numpy())
        kern = np.flatnonzero((pos >= 0) & att["is_kernel"].to_numpy(dtype=bool))
        pos = pos[kern]
        return np.bincount(pos, minlength=len(phases)), sum_by(pos, att["duration_ns"].to_numpy()[kern], len(phases))

    if kernel_time is None:
        kernels, kernel_ns = per_row(attributed)
    else:
        own = kernel_time.loc[phases.index]
        kernels, kernel_ns = own["kernels"].to_numpy(), own["kernel_time_ns"].to_numpy()
    window_kernels, window_ns = per_row(window)
    df = pd.DataFrame(
        {
            "range": range_label(phases).to_numpy(),
            "cpu_ns": phases["duration_ns"].to_numpy(),
            "kernels": kernels,
            "kernel_ns": kernel_ns,
            "window_kernels": window_kernels,
            "window_ns": window_ns,
        }
    )
    return phase_means(df)


def phase_means(df: pd.DataFrame) -> pd.DataFrame:
    """PHASE_COLUMNS from one row per phase instance (range, cpu_ns, kernels, kernel_ns, window_kernels, window_ns),
    instances in row order: the tail of ``summarize_phases``, also of a report read in time windows."""
    g = df.groupby("range", sort=False)
    return pd.DataFrame(
        {
            "instances": g.size(),
            "cpu_avg_ns": g["cpu_ns"].mean(),
            "kernels_per_instance": g["kernels"].mean(),
            "kernel_per_instance_ns": g["kernel_ns"].mean(),
            "window_kernels_per_instance": g["window_kernels"].mean(),
            "window_kernel_per_instance_ns": g["window_ns"].mean(),
        }
    ).reset_index()[PHASE_COLUMNS]


TABLES = (
    "phases",
    "phase_kernels",
    "phase_categories",
    "ops",
    "summary",
    "kernels",
    "categories",
    "api",
    "memops",
    "attributed",
    "ranges",
    "range_names",
    "range_groups",
    "range_kernels",
    "range_group_kernels",
    "projection",
)


def analyze_trace(trace: Trace, tables: Collection[str] = TABLES, threads: int = 2) -> dict[str, pd.DataFrame]:
    """Every breakdown of one trace, by name: the entry point for notebooks and reports.

    ``tables`` names the ones to return (all of TABLES by default): a report skips the
    tables it never shows, such as range_kernels (0.1 s on a million kernels), and takes "range_names" (the
    distinct range names, the rows of "ranges" but the unnamed one) where it only counts the names of "ranges". "launches", never
    returned unless named, is the ops' match to their launching calls (``projection.launches`` with
    runtime_row), which the report's diagnosis takes instead of matching a million ops again. The work is
    shared with a second thread (``start_analysis``); ``threads=1`` runs every job in this thread, in the
    order submitted: the sequential reference the threaded result must equal.
    """
    with ThreadPoolExecutor(max_workers=1) if threads > 1 else InPlace() as pool:
        return start_analysis(trace, tables, pool).tables()


def start_analysis(
    trace: Trace, tables: Collection[str], pool: Executor, early: Callable[[pd.DataFrame], list[Job]] | None = None
) -> Analysis:
    """``analyze_trace``'s tables computed on this thread and on ``pool``'s one thread; ``Analysis.tables()`` has them all.

    The second thread matches the ops to their launches (from their ids alone, waiting there for a
    runtime table still being read) while this one builds and classifies the ops, sums
    them up (``op_tables``) and builds the overview (``summarize_trace``); then it builds the
    phase tables, which need no (range, op) pair of all ranges (``phase_tables``), while this
    one projects every range. numpy and pandas release the GIL in their loops, so with a
    second core free a big trace takes a third less time. Jobs this thread finds not yet started
    when it wants their result it takes back and runs itself (``taken_back``). It returns once its own
    share is done, the last jobs perhaps still queued: the caller may queue more work for the pool
    (the report's diagnosis) before it asks for ``tables()``, so that neither thread waits for the other.
    ``early(ops)``, called once the ops are built, queues jobs of the caller that need only them (the report's
    kernel sequences): this thread takes them back while the runtime table it needs next is still arriving,
    instead of waiting for it (on the 150-copy export and a loaded VM, the early read delivered it 0.2-0.3
    CPU-s after this thread had classified and summed the ops: benchmarks/README.md, "Report speed").
    """
    with_rows = "launches" in tables  # for the diagnosis (analyze.launches.launch_table): no second match
    side_launches = pool.submit(lambda: launches(op_ids(trace), trace.runtime, with_rows))  # may wait for the runtime
    ops = gpu_ops(trace)
    slim = ops[PROJECTED_COLUMNS]  # a (range, op) table has a row per enclosing range: carry only what is used
    # Queued now, behind the launches it needs: the second thread goes on to it with no wait for this one.
    side = pool.submit(lambda: phase_tables(trace, slim, side_launches.result(), tables))

    def api_tables() -> dict[str, pd.DataFrame]:
        return {"api": summarize_api(trace.runtime)} if "api" in tables else {}

    # Last in the queue: whichever thread is free takes it. This one does when the launches are not matched yet
    # by the time it wants them (it needs the runtime table too), instead of waiting (0.07 s of CPU on 1.4M calls).
    side_api = Job(pool, api_tables)
    waiting = early(ops) if early is not None else []
    op_summaries = op_tables(ops, tables)
    if "memops" in tables:
        op_summaries["memops"] = summarize_memops(trace.memops)
    for job in waiting:  # the caller's jobs, run here while the runtime table the next step needs is arriving
        if trace.arrived("runtime"):
            break
        job.result()
    # The overview needs the runtime table (the trace's span) but not the launches: built here while the
    # other thread matches them (this one used to wait for them), given their count once they are.
    overview = summarize_trace(trace, ops) if "summary" in tables else None
    if not side_launches.done():
        side_api.result()
    launched = side_launches.result()
    if overview is not None:
        op_summaries["summary"] = overview.assign(launched_ops=len(launched))
    attributed = project_nvtx(trace.nvtx, slim, launched)

    # The (range, kernel) tables, then the kernel time per range: queued for the second thread after its
    # first jobs, and taken back by this one when it gets to them first (a job not started is cancelled and
    # run here). Which thread is free first depends on the trace and on the machine. The longer job goes
    # first: this thread takes the shorter one back, and neither waits long for the other at the end
    # (the other order left this one idle for 0.05 s of a 1.1M-kernel report).
    outside_of = slim if len(trace.nvtx) else None  # the ops of the unnamed range (none without ranges)

    def pair_tables() -> dict[str, pd.DataFrame]:
        summaries = {
            "range_kernels": lambda: summarize_range_kernels(attributed, ops=outside_of),
            "range_group_kernels": lambda: summarize_range_kernels(attributed, group_emit_nvtx=True, ops=outside_of),
        }
        return {name: summarize() for name, summarize in summaries.items() if name in tables}

    side_pairs = Job(pool, pair_tables)
    side_kernel_time = pool.submit(range_kernel_time, trace.nvtx, attributed)
    projection = summarize_projection(trace.nvtx, attributed)
    kernel_time = taken_back(side_kernel_time, range_kernel_time, trace.nvtx, attributed)

    def phase_table() -> pd.DataFrame:
        _, phases, window = side.result()  # asked for last: the second thread has mostly finished it
        return summarize_phases(phases, attributed, window, kernel_time)

    summaries = {  # each table, computed only when asked for
        "ranges": lambda: summarize_ranges(trace.nvtx, attributed, projection, kernel_time=kernel_time, ops=outside_of),
        "range_groups": lambda: summarize_ranges(
            trace.nvtx, attributed, projection, group_emit_nvtx=True, kernel_time=kernel_time, ops=outside_of
        ),
        "phases": phase_table,
        "range_names": lambda: pd.DataFrame({"range": range_name_codes(trace.nvtx)[1]}),
    }
    out = {name: summarize() for name, summarize in summaries.items() if name in tables}
    out |= op_summaries | side.result()[0]
    out |= {"ops": ops, "attributed": attributed, "projection": projection, "launches": launched}
    return Analysis(tables, out, [side_api, side_pairs])


class Analysis:
    """``start_analysis``'s tables: those made so far (``ready``), and the jobs still queued or running."""

    def __init__(self, wanted: Collection[str], ready: dict[str, pd.DataFrame], queued: list[Job]):
        self.wanted, self.ready, self.queued = wanted, ready, queued

    def tables(self) -> dict[str, pd.DataFrame]:
        """Every table asked for, in TABLES order ("launches" last): the queued jobs taken back or waited for."""
        out = dict(self.ready)
        for job in self.queued:  # the API summary first (mostly done long ago), then the (range, kernel) tables
            out |= job.result()
        return {name: out[name] for name in (*TABLES, "launches") if name in self.wanted}


class InPlace(Executor):
    """An executor that runs each job when submitted, in the calling thread: ``analyze_trace(threads=1)``."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as error:  # kept for result(), as a pool's thread would
            future.set_exception(error)
        return future


class Job:
    """A function queued for a pool's thread, run by the asking thread instead if that one has not started it.

    ``taken_back`` for a result asked for more than once: a job this thread ran is not run again.
    """

    def __init__(self, pool: Executor, fn: Callable, *args):
        self.fn, self.args = fn, args
        self.future = pool.submit(fn, *args)
        self.done: tuple | None = None  # (result,) once asked for

    def result(self):
        if self.done is None:
            self.done = (taken_back(self.future, self.fn, *self.args),)
        return self.done[0]


def taken_back(queued: Future, fn, *args):
    """The result of ``queued`` (``fn(*args)`` submitted to a pool): run here if it has not started, else waited for."""
    return fn(*args) if queued.cancel() else queued.result()


def op_tables(ops: pd.DataFrame, tables: Collection[str] = TABLES) -> dict[str, pd.DataFrame]:
    """The per-op tables (kernels, categories) among ``tables``: the part of ``analyze_trace`` that needs only the ops."""
    summaries = {
        "kernels": lambda: summarize_kernels(ops),
        "categories": lambda: summarize_categories(ops),
    }
    return {name: summarize() for name, summarize in summaries.items() if name in tables}


def phase_tables(
    trace: Trace, slim: pd.DataFrame, launched: pd.DataFrame, tables: Collection[str] = TABLES
) -> tuple[dict[str, pd.DataFrame], pd.DataFrame, pd.DataFrame]:
    """The part of ``analyze_trace`` that needs the launches but no (range, op) pair of all ranges.

    Returns the phase tables of the window view (phase_kernels, phase_categories) among
    ``tables``, the phase ranges and their window projection
    (``project_nvtx(phases, slim, launched, any_thread=True)``).
    """
    phases = phase_ranges(trace.nvtx)
    window = project_nvtx(phases, slim, launched, any_thread=True)
    summaries = {
        "phase_kernels": lambda: summarize_range_kernels(window),
        "phase_categories": lambda: summarize_ranges(phases, window, summarize_projection(phases, window)),
    }
    return {name: summarize() for name, summarize in summaries.items() if name in tables}, phases, window
