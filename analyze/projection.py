"""NVTX (or record_function) ranges projected onto GPU work, as NVIDIA defines it.

A GPU operation (kernel, memcpy, memset) belongs to a range when the CPU call
that launched it (the runtime row with the same correlation id in the same
process) starts and ends inside the range, on the thread that opened it. It
counts under every enclosing range, not only the innermost. A range's projected
GPU span runs from the first to the last operation it encloses. Ranges closed on
another thread (start/end ranges with an end thread) are not projected, as in
nsys's ``nvtxkernsum`` and ``nvtxgpuproj`` reports.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def launches(ops: pd.DataFrame, runtime: pd.DataFrame) -> pd.DataFrame:
    """Each GPU op with its launching call: columns op_row, pid, tid, launch_start_ns, launch_end_ns.

    Ops without a matching runtime row (no correlation id, API not traced) are left out.
    The match is on (pid, correlation id), first runtime row wins; exports without a
    process id on GPU rows match on the correlation id alone. Rows keep the ops' order.
    """
    rt_cid = runtime["correlation_id"].to_numpy()
    has_cid = np.flatnonzero(rt_cid >= 0)
    if ops.empty or len(has_cid) == 0:
        return pd.DataFrame(
            {"op_row": [], "pid": [], "tid": [], "launch_start_ns": [], "launch_end_ns": []}, dtype="int64"
        )
    rt_cid, rt_pid = rt_cid[has_cid], runtime["pid"].to_numpy()[has_cid]
    op_cid, op_pid = ops["correlation_id"].to_numpy(), ops["pid"].to_numpy()
    if (op_pid < 0).all():
        rt_pid, op_pid = np.zeros_like(rt_pid), np.zeros_like(op_pid)
    # One integer key per (pid, correlation id) pair, so the join is a lookup instead of a merge.
    rt_pid_code, pids = pd.factorize(rt_pid)
    stride = int(rt_cid.max()) + 1
    rt_key = rt_pid_code * stride + rt_cid
    op_pid_code = pd.Index(pids).get_indexer(op_pid)
    valid = (op_pid_code >= 0) & (op_cid >= 0) & (op_cid < stride)
    op_key = np.where(valid, op_pid_code * stride + op_cid, 0)
    rt_row = first_row_of_key(rt_key, op_key)  # first runtime row per key, as drop_duplicates keeps
    matched = valid & (rt_row >= 0)
    op_rows = np.flatnonzero(matched)
    rt_rows = has_cid[rt_row[op_rows]]
    return pd.DataFrame(
        {
            "op_row": op_rows.astype(np.int64),
            "pid": runtime["pid"].to_numpy()[rt_rows],
            "tid": runtime["tid"].to_numpy()[rt_rows],
            "launch_start_ns": runtime["start_ns"].to_numpy()[rt_rows],
            "launch_end_ns": runtime["end_ns"].to_numpy()[rt_rows],
        },
        copy=False,  # fresh arrays: skip pandas' copy into one 2-D block
    )


def first_row_of_key(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each of ``wanted``, the first row of ``keys`` holding it, or -1."""
    uniq, first = np.unique(keys, return_index=True)
    pos = np.searchsorted(uniq, wanted).clip(max=len(uniq) - 1)
    return np.where(uniq[pos] == wanted, first[pos], -1)


def attribute(ranges: pd.DataFrame, launched: pd.DataFrame) -> pd.DataFrame:
    """Pairs (range_row, op_row): the op was launched inside the range on the range's thread.

    ``ranges`` needs start_ns, end_ns, pid, tid, end_tid; ``launched`` comes from
    ``launches()``. Per thread, launches sorted by start make the candidates of a
    range one contiguous slice (``searchsorted``), checked for the end bound.
    """
    pieces = []
    eligible = ranges.index[(ranges["end_tid"].to_numpy() < 0)]
    rng = ranges.loc[eligible, ["start_ns", "end_ns", "pid", "tid"]]
    rng = rng.assign(range_row=np.asarray(eligible))
    by_thread = {k: g for k, g in launched.groupby(["pid", "tid"], sort=False)}
    for key, r in rng.groupby(["pid", "tid"], sort=False):
        lau = by_thread.get(key)
        if lau is None:
            continue
        lau = lau.sort_values("launch_start_ns", kind="stable")
        ls, le = lau["launch_start_ns"].to_numpy(), lau["launch_end_ns"].to_numpy()
        lo = np.searchsorted(ls, r["start_ns"].to_numpy(), side="left")
        hi = np.searchsorted(ls, r["end_ns"].to_numpy(), side="right")
        counts = hi - lo
        total = int(counts.sum())
        if total == 0:
            continue
        first = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
        pos = np.arange(total) + first
        range_rows = np.repeat(r["range_row"].to_numpy(), counts)
        keep = le[pos] <= np.repeat(r["end_ns"].to_numpy(), counts)
        pieces.append(pd.DataFrame({"range_row": range_rows[keep], "op_row": lau["op_row"].to_numpy()[pos[keep]]}))
    if not pieces:
        return pd.DataFrame({"range_row": [], "op_row": []}, dtype="int64")
    return pd.concat(pieces, ignore_index=True)


def range_label(ranges: pd.DataFrame) -> pd.Series:
    """Range names as nsys prints them: ``domain:name`` in a named domain, else ``name``."""
    name = ranges["name"].astype(str)
    domain = ranges["domain"].astype(str)
    return name.where(domain == "", domain + ":" + name)


def project_nvtx(
    ranges: pd.DataFrame, ops: pd.DataFrame, launched: pd.DataFrame, any_thread: bool = False
) -> pd.DataFrame:
    """Attribute GPU ops to every enclosing range.

    Args:
        ranges: NVTX_RANGES table (or a subset of its rows).
        ops: GPU operations (kernels and memops) with start_ns, end_ns, duration_ns,
            pid, correlation_id and any other columns to carry (name, category, is_kernel).
        launched: ``launches(ops, runtime)``, each op with its launching CPU call.
        any_thread: count ops launched by any thread of the range's process while
            the range was open (a time window), not only the range's own thread as
            nsys does. Autograd launches backward kernels from its own thread, so a
            "backward" range needs this view.

    Returns:
        One row per (range instance, op): ``range_row`` (index label in ``ranges``),
        ``range`` (label), ``op_row`` (index into ``ops``), and the op's columns.
    """
    if any_thread:
        ranges, launched = ranges.assign(tid=0, end_tid=-1), launched.assign(tid=0)
    pairs = attribute(ranges, launched)
    range_rows = pairs["range_row"].to_numpy()
    # Label each pair through its range's code: strings are looked up once per range, not per pair.
    codes, labels = pd.factorize(range_label(ranges), sort=True)
    range_codes = codes[ranges.index.get_indexer(range_rows)]
    out = ops.iloc[pairs["op_row"].to_numpy()].reset_index(drop=True)
    out.insert(0, "op_row", pairs["op_row"].to_numpy())
    out.insert(0, "range", pd.Categorical.from_codes(range_codes, categories=labels).remove_unused_categories())
    out.insert(0, "range_row", range_rows)
    return out


PROJECTION_COLUMNS = [
    "range_row",
    "range",
    "cpu_start_ns",
    "cpu_duration_ns",
    "gpu_start_ns",
    "gpu_duration_ns",
    "gpu_ops",
    "kernel_time_ns",
]


def summarize_projection(ranges: pd.DataFrame, attributed: pd.DataFrame) -> pd.DataFrame:
    """Per range instance, its projected GPU span (as nsys ``nvtxgpuproj``).

    Returns columns range_row, range, cpu_start_ns, cpu_duration_ns,
    gpu_start_ns, gpu_duration_ns (first op start to last op end), gpu_ops
    (distinct correlation ids), kernel_time_ns (summed kernel durations),
    one row per range instance in order of range_row. Ranges enclosing no GPU
    op are absent, as in nsys.
    """
    if attributed.empty:
        return pd.DataFrame({c: [] for c in PROJECTION_COLUMNS})
    # Aggregate per position of the range in ``ranges`` with numpy's unbuffered ufunc.at.
    pos = ranges.index.get_indexer(attributed["range_row"].to_numpy())
    n = len(ranges)
    gpu_start = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(gpu_start, pos, attributed["start_ns"].to_numpy())
    gpu_end = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(gpu_end, pos, attributed["end_ns"].to_numpy())
    kernel_ns = np.where(attributed["is_kernel"].to_numpy(dtype=bool), attributed["duration_ns"].to_numpy(), 0)
    kernel_time = sum_by(pos, kernel_ns, n)
    gpu_ops = count_distinct(pos, attributed["correlation_id"].to_numpy(), n)
    has_ops = np.flatnonzero(np.bincount(pos, minlength=n))
    rows = has_ops[np.argsort(ranges.index.to_numpy()[has_ops], kind="stable")]
    return pd.DataFrame(
        {
            "range_row": ranges.index.to_numpy()[rows],
            "range": range_label(ranges).to_numpy()[rows],
            "cpu_start_ns": ranges["start_ns"].to_numpy()[rows],
            "cpu_duration_ns": ranges["duration_ns"].to_numpy()[rows],
            "gpu_start_ns": gpu_start[rows],
            "gpu_duration_ns": gpu_end[rows] - gpu_start[rows],
            "gpu_ops": gpu_ops[rows],
            "kernel_time_ns": kernel_time[rows],
        }
    )


def sum_by(codes: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Integer sums of ``values`` per group code 0..n-1 (np.add.at stays int64-exact; bincount weights are float)."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, codes, values)
    return out


def count_distinct(codes: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Number of distinct ``values`` per group code 0..n-1 (a fast ``groupby(codes).nunique()`` on integers).

    Each (code, value) pair becomes one int64, ``code * width + value``, so one sort finds the distinct pairs
    (np.sort, not np.unique: numpy 2.4's np.unique hashes and is ~50x slower on a million keys).
    """
    if len(values) == 0:
        return np.zeros(n, dtype=np.int64)
    values = values.astype(np.int64) - values.min()
    width = int(values.max()) + 1
    keys = np.sort(codes.astype(np.int64) * width + values)
    distinct = keys[np.r_[True, keys[1:] != keys[:-1]]]
    return np.bincount(distinct // width, minlength=n)
