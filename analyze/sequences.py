"""Repeating kernel sequences: the runs of n consecutive kernels on one stream that recur most, by GPU time.

A sequence that repeats thousands of times (say ``mul -> add -> tanh``) is a fusion candidate: one fused
kernel would read and write memory once and be launched once (HTA ``get_frequent_cuda_kernel_sequences``
finds them per CPU operator; here they are found over each stream's whole kernel order, overlapping
occurrences counted).

Given the runtime calls and the CPU-side ranges (Kineto cpu ops, record_function and NVTX ranges), each
sequence also names what launched it, as HTA's op stack does: ``launched_by`` is the innermost range open
on the launching thread at each kernel's launch call (named once when it is the same for all), and
``op_stack`` the outer part of those stacks (range names, outermost first) that all kernels of the sequence
share: the scope a fused kernel would replace. Both are the most common over up to SAMPLE_OCCURRENCES occurrences spread over the trace;
``op_stack_frac`` is the share of those with that stack. ProfilerStep#N ranges are left out (every step has its own number).
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pandas as pd
from profiler_kit.analyze.idle import stream_order

SEQUENCE_COLUMNS = ["length", "sequence", "occurrences", "total_ns", "share_frac", "per_occurrence_ns"]
LAUNCHER_COLUMNS = ["launched_by", "op_stack", "op_stack_frac"]
SAMPLE_OCCURRENCES = 8
STEP_RANGE = re.compile(r"^ProfilerStep#\d+$")
NO_RANGE = "-"  # launched outside every range


def kernel_sequences(
    ops: pd.DataFrame,
    lengths: tuple[int, ...] = (3, 5),
    top: int = 10,
    runtime: pd.DataFrame | None = None,
    ranges: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The ``top`` sequences of each length in ``lengths`` by total GPU time (SEQUENCE_COLUMNS).

    ``ops`` is ``gpu_ops(trace)``; only kernels count, in start order per (pid, device, stream).
    ``sequence`` joins the kernel names with " -> "; ``share_frac`` is of all kernel time;
    ``per_occurrence_ns`` the mean time of one occurrence. With ``runtime`` (the trace's runtime calls) and
    ``ranges`` (name, start_ns, end_ns, pid, tid: ``launch_ranges``), also LAUNCHER_COLUMNS (module docstring).
    """
    attribute = runtime is not None and ranges is not None
    columns = SEQUENCE_COLUMNS + (LAUNCHER_COLUMNS if attribute else [])
    is_kernel = np.flatnonzero(ops["is_kernel"].to_numpy(dtype=bool))
    if not len(is_kernel):
        return pd.DataFrame(columns=columns)
    n_ops = len(ops)
    keys = [np.broadcast_to(ops[c].to_numpy(), n_ops)[is_kernel] for c in ("pid", "device_id", "stream_id")]
    code, _, order = stream_order(keys, ops["start_ns"].to_numpy()[is_kernel])
    rows = is_kernel[order]
    kernel_rows = rows
    stream = code[order]
    name = pd.Categorical(ops["name"])
    names, labels = name.codes[rows].astype(np.int64), name.categories
    dur = ops["duration_ns"].to_numpy()[rows]
    running = np.concatenate([[0], np.cumsum(dur, dtype=np.int64)])  # GPU time of the first i kernels
    all_ns = int(running[-1])
    rows, samples = [], []
    for n in lengths:
        if len(names) < n:
            continue
        m = len(names) - n + 1
        same = stream[:m] == stream[n - 1 :]  # the window's first and last kernel on one stream
        key = _window_ids(names, n)
        total = running[n:] - running[:m]  # each window's GPU time
        key, total = key[same], total[same]
        if not len(key):  # every window crosses streams: nothing repeats on one stream
            continue
        first = np.flatnonzero(same)
        count = np.bincount(key)
        time = np.bincount(key, weights=total)
        best = np.argsort(-time, kind="stable")[:top]
        where = np.full(len(count), -1)
        where[key[::-1]] = first[::-1]  # first occurrence of each key
        if attribute:  # the window starts of the best keys, grouped by key: one pass, not one per key
            wanted = np.zeros(len(count), dtype=bool)
            wanted[best] = True
            mine = np.flatnonzero(wanted[key])
            mine = mine[np.argsort(key[mine], kind="stable")]
            bounds = np.searchsorted(key[mine], best[np.argsort(best)])
            starts_of = dict(zip(np.sort(best).tolist(), np.split(first[mine], bounds[1:]), strict=True))
        for k in best:
            if count[k] < 2:
                continue
            at = where[k]
            seq = " -> ".join(str(labels[c]) for c in names[at : at + n])
            rows.append(
                [n, seq, int(count[k]), int(time[k]), time[k] / all_ns if all_ns else np.nan, time[k] / count[k]]
            )
            if attribute:
                starts = starts_of[int(k)]
                starts = starts[np.unique(np.linspace(0, len(starts) - 1, SAMPLE_OCCURRENCES).round().astype(int))]
                samples.append(kernel_rows[starts[:, None] + np.arange(n)])  # ops rows: occurrence x position
    out = pd.DataFrame(rows, columns=SEQUENCE_COLUMNS)
    if attribute and samples:
        stacks = launch_stacks(ops, runtime, ranges, np.concatenate([x.ravel() for x in samples]))
        found, at = [], 0
        for sample in samples:
            found.append(_most_common(stacks[at : at + sample.size], sample.shape))
            at += sample.size
        out = out.assign(**{c: [f[i] for f in found] for i, c in enumerate(LAUNCHER_COLUMNS)})
    return out[columns] if len(out) else pd.DataFrame(columns=columns)


def launch_ranges(*tables: pd.DataFrame | None) -> pd.DataFrame:
    """The CPU-side ranges that can launch kernels, as one table (name, start_ns, end_ns, pid, tid): Kineto's
    cpu ops (reader's ``meta["cpu_op_ranges"]``) and ``trace.nvtx`` (record_function / NVTX push-pop ranges),
    ProfilerStep#N left out."""
    cols = ["name", "start_ns", "end_ns", "pid", "tid"]
    parts = [t[cols].assign(name=t["name"].astype(str)) for t in tables if t is not None and len(t)]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "name" else "int64") for c in cols})
    df = pd.concat(parts, ignore_index=True)
    return df[~df["name"].str.match(STEP_RANGE.pattern)].reset_index(drop=True)


def launch_stacks(ops: pd.DataFrame, runtime: pd.DataFrame, ranges: pd.DataFrame, rows: np.ndarray) -> list:
    """Per row of ``ops`` in ``rows``: the names of the ranges open on the launching thread at its launch call,
    outermost first (a tuple), or None when its launch is not in the trace (pid and correlation id, first
    runtime row wins, as analyze.projection.launches)."""
    corr = np.broadcast_to(ops["correlation_id"].to_numpy(), len(ops))[rows]
    pid = np.broadcast_to(ops["pid"].to_numpy(), len(ops))[rows]
    rt = runtime[rows_with(runtime["correlation_id"].to_numpy(), corr)].drop_duplicates(["pid", "correlation_id"])
    at = pd.MultiIndex.from_frame(rt[["pid", "correlation_id"]]).get_indexer(pd.MultiIndex.from_arrays([pid, corr]))
    call_pid, call_tid, call_start = (rt[c].to_numpy() for c in ("pid", "tid", "start_ns"))
    threads = {}
    for key, g in ranges.sort_values("start_ns", kind="stable").groupby(["pid", "tid"], sort=False):
        threads[key] = (g["start_ns"].to_numpy(), g["end_ns"].to_numpy(), g["name"].to_numpy())
    none = (np.empty(0, dtype=np.int64),) * 2 + (np.empty(0, dtype=object),)
    out = []
    for i in at:
        if i < 0:
            out.append(None)
            continue
        ts = call_start[i]
        r_start, r_end, r_name = threads.get((call_pid[i], call_tid[i]), none)
        open_ = np.flatnonzero(r_end[: np.searchsorted(r_start, ts, "right")] > ts)  # started by the call, not ended
        out.append(tuple(r_name[open_[np.lexsort((-r_end[open_], r_start[open_]))]]))  # outermost first
    return out


def rows_with(values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """``np.isin(values, wanted)`` for a few wanted ids among many values: one gather from a lookup table
    when the ids are small non-negative ints (correlation ids), else np.isin."""
    if len(values) and len(wanted) and values.dtype.kind in "iu":
        lo, hi = int(values.min()), int(values.max())
        if lo >= 0 and hi < 32 * len(values) + (1 << 20):  # a table of at most ~32 bytes per value
            table = np.zeros(hi + 1, dtype=bool)
            table[wanted[(wanted >= 0) & (wanted <= hi)]] = True
            return table[values]
    return np.isin(values, wanted)


def _most_common(stacks: list, shape: tuple) -> tuple:
    """(launched_by, op_stack, op_stack_frac) over occurrences (``stacks`` row-major, ``shape`` = occurrences x
    kernels), leaving out those with a launch not in the trace."""
    by, common_stacks = Counter(), Counter()
    for o in range(shape[0]):
        per_kernel = stacks[o * shape[1] : (o + 1) * shape[1]]
        if any(s is None for s in per_kernel):
            continue
        launchers = [s[-1] if s else NO_RANGE for s in per_kernel]
        by[launchers[0] if len(set(launchers)) == 1 else " -> ".join(launchers)] += 1
        common = per_kernel[0]
        for s in per_kernel[1:]:
            common = common[: _shared_prefix(common, s)]
        common_stacks[" > ".join(common) or NO_RANGE] += 1
    if not by:
        return "", "", np.nan
    stack, times = common_stacks.most_common(1)[0]
    return by.most_common(1)[0][0], stack, times / sum(common_stacks.values())


def _shared_prefix(a: tuple, b: tuple) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _window_ids(names: np.ndarray, n: int) -> np.ndarray:
    """A dense id per window of ``n`` consecutive name codes, numbered in order of first appearance.

    The window's codes packed as the digits of one int64 when they fit: one hash pass over the windows
    instead of one per added name (n - 1).
    """
    m = len(names) - n + 1
    base = int(names.max()) + 1
    if base**n < 2**63:
        key = names[:m].copy()
        for i in range(1, n):
            key = key * base + names[i : i + m]
        return pd.factorize(key)[0].astype(np.int64)
    key = names[:m]
    for i in range(1, n):  # one dense id per distinct (previous key, next name) pair
        key = pd.factorize(key * base + names[i : i + m])[0].astype(np.int64)
    return key
