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
from collections.abc import Callable

import numpy as np
import pandas as pd
from profiler_kit.analyze.idle import in_order, stream_sort
from profiler_kit.analyze.tables import one_value_view

SEQUENCE_COLUMNS = ["length", "sequence", "occurrences", "total_ns", "share_frac", "per_occurrence_ns"]
LAUNCHER_COLUMNS = ["launched_by", "op_stack", "op_stack_frac"]
SAMPLE_OCCURRENCES = 8
STEP_RANGE = re.compile(r"^ProfilerStep#\d+$")
NO_RANGE = "-"  # launched outside every range


def kernel_sequences(
    ops: pd.DataFrame,
    lengths: tuple[int, ...] = (3, 5),
    top: int = 10,
    runtime: pd.DataFrame | Callable[[], pd.DataFrame] | None = None,
    ranges: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The ``top`` sequences of each length in ``lengths`` by total GPU time (SEQUENCE_COLUMNS).

    ``ops`` is ``gpu_ops(trace)``; only kernels count, in start order per (pid, device, stream).
    ``sequence`` joins the kernel names with " -> "; ``share_frac`` is of all kernel time;
    ``per_occurrence_ns`` the mean time of one occurrence. With ``runtime`` (the trace's runtime calls) and
    ``ranges`` (name, start_ns, end_ns, pid, tid: ``launch_ranges``), also LAUNCHER_COLUMNS (module docstring).
    ``runtime`` may be a function giving the calls, asked only at that last step: a report finds the sequences
    while its runtime table is still being read (``profiler_kit.build.analyze_source``).
    """
    attribute = runtime is not None and ranges is not None
    columns = SEQUENCE_COLUMNS + (LAUNCHER_COLUMNS if attribute else [])
    kernels = stream_kernels(ops)
    if kernels is None:
        return pd.DataFrame(columns=columns)
    kernel_rows, stream, names, labels, running = kernels
    all_ns = int(running[-1])
    rows, samples = [], []
    for n in lengths:
        if len(names) < n:
            continue
        m = len(names) - n + 1
        key = _window_ids(names, n)
        total = running[n:] - running[:m]  # each window's GPU time
        first = None  # the window of each key row: itself, when every kernel runs on one stream
        if stream is not None:
            first = np.flatnonzero(stream[:m] == stream[n - 1 :])  # the window's first and last kernel on one stream
            key, total = key[first], total[first]
        if not len(key):  # every window crosses streams: nothing repeats on one stream
            continue
        count = np.bincount(key)
        time = np.bincount(key, weights=total)
        best = np.argsort(-time, kind="stable")[:top]
        starts_of = occurrences(key, best, first)
        for k in best:
            if count[k] < 2:
                continue
            starts = starts_of[int(k)]
            at = starts[0]  # the first occurrence
            seq = " -> ".join(str(labels[c]) if c >= 0 else "" for c in names[at : at + n])
            rows.append(
                [n, seq, int(count[k]), int(time[k]), time[k] / all_ns if all_ns else np.nan, time[k] / count[k]]
            )
            if attribute:
                starts = starts[np.unique(np.linspace(0, len(starts) - 1, SAMPLE_OCCURRENCES).round().astype(int))]
                samples.append(kernel_rows[starts[:, None] + np.arange(n)])  # ops rows: occurrence x position
    out = pd.DataFrame(rows, columns=SEQUENCE_COLUMNS)
    if attribute and samples:
        calls = runtime() if callable(runtime) else runtime
        stacks = launch_stacks(ops, calls, ranges, np.concatenate([x.ravel() for x in samples]))
        found, at = [], 0
        for sample in samples:
            found.append(_most_common(stacks[at : at + sample.size], sample.shape))
            at += sample.size
        out = out.assign(**{c: [f[i] for f in found] for i, c in enumerate(LAUNCHER_COLUMNS)})
    return out[columns] if len(out) else pd.DataFrame(columns=columns)


def stream_kernels(ops: pd.DataFrame) -> tuple | None:
    """The kernels of ``ops`` one stream after another, each in start order (``analyze.idle.stream_sort``): their
    ops rows, stream codes (None when one stream ran them all: no window crosses streams), name codes (int64),
    the name labels and the running sum of their GPU time (from 0). None without kernels.

    The kernels are the first rows of ``gpu_ops`` (the memcpy/memset rows follow), rows already in order on
    one stream are the usual nsys export, and a column of one value is a view: then the columns are read as
    slices, not gathered by the kernel rows and again by an order that changes nothing (~0.1 s of CPU on the
    150-copy export: benchmarks/README.md, "Report speed").
    """
    is_kernel = np.flatnonzero(ops["is_kernel"].to_numpy(dtype=bool))
    if not len(is_kernel):
        return None
    n = len(is_kernel)
    first_rows = is_kernel[-1] == n - 1  # rising rows, the last at n - 1: the kernels are rows 0 to n - 1

    def column(values: np.ndarray) -> np.ndarray:
        values = np.broadcast_to(values, len(ops))
        return values[:n] if first_rows or one_value_view(values) else values[is_kernel]

    keys = [column(ops[c].to_numpy()) for c in ("pid", "device_id", "stream_id")]
    code, n_codes, order = stream_sort(keys, column(ops["start_ns"].to_numpy()))
    rows = in_order(is_kernel, order)
    stream = None if n_codes == 1 else in_order(code, order)
    name = pd.Categorical(ops["name"])
    if order is None:
        names, dur = column(name.codes), column(ops["duration_ns"].to_numpy())
    else:
        names, dur = name.codes[rows], ops["duration_ns"].to_numpy()[rows]
    running = np.zeros(n + 1, dtype=np.int64)  # GPU time of the first i kernels
    np.cumsum(dur, dtype=np.int64, out=running[1:])
    return rows, stream, names.astype(np.int64), name.categories, running


def occurrences(key: np.ndarray, best: np.ndarray, first: np.ndarray | None) -> dict[int, np.ndarray]:
    """For each key in ``best``: the window starts (``first[i]`` of each row i holding it, or i itself when
    ``first`` is None) in order. One pass: the rows of the wanted keys grouped by a stable radix sort of
    their small rank among ``best``, where a stable sort of their int64 keys took ~0.05 s of CPU on the
    150-copy export (benchmarks/README.md, "Report speed")."""
    wanted = np.sort(best)
    rank = np.full(int(key.max()) + 1, -1, dtype=np.int16 if len(wanted) < 2**15 else np.int64)
    rank[wanted] = np.arange(len(wanted))
    ranks = rank[key]
    mine = np.flatnonzero(ranks >= 0)
    ranks = ranks[mine]
    mine = mine[np.argsort(ranks, kind="stable")]
    if first is not None:
        mine = first[mine]
    bounds = np.cumsum(np.bincount(ranks, minlength=len(wanted)))[:-1]
    return dict(zip(wanted.tolist(), np.split(mine, bounds), strict=True))


def launch_ranges(*tables: pd.DataFrame | None) -> pd.DataFrame:
    """The CPU-side ranges that can launch kernels, as one table (name, start_ns, end_ns, pid, tid): Kineto's
    cpu ops (reader's ``meta["cpu_op_ranges"]``) and ``trace.nvtx`` (record_function / NVTX push-pop ranges),
    ProfilerStep#N left out. Names stay as they come (NVTX names as categories; judged per category)."""
    cols = ["name", "start_ns", "end_ns", "pid", "tid"]
    parts = [t[cols] for t in tables if t is not None and len(t)]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "name" else "int64") for c in cols})
    parts = [p[~is_step(p["name"])] for p in parts]
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)


def is_step(names: pd.Series) -> np.ndarray:
    """The names that are ProfilerStep#N (STEP_RANGE). A categorical column is judged per category and read
    through its codes: its 77k NVTX names as text cost the 150-copy export ~0.05 s (benchmarks/README.md,
    "Report speed")."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        texts = pd.Series(names.cat.categories.astype(str))
        hit = np.append(np.asarray(texts.str.match(STEP_RANGE.pattern), dtype=bool), False)  # code -1: no name
        return hit[names.cat.codes.to_numpy()]
    return np.asarray(names.astype(str).str.match(STEP_RANGE.pattern), dtype=bool)


def launch_stacks(ops: pd.DataFrame, runtime: pd.DataFrame, ranges: pd.DataFrame, rows: np.ndarray) -> list:
    """Per row of ``ops`` in ``rows``: the names of the ranges open on the launching thread at its launch call,
    outermost first (a tuple), or None when its launch is not in the trace (pid and correlation id, first
    runtime row wins, as analyze.projection.launches)."""
    corr = np.broadcast_to(ops["correlation_id"].to_numpy(), len(ops))[rows]
    pid = np.broadcast_to(ops["pid"].to_numpy(), len(ops))[rows]
    rt_corr = runtime["correlation_id"].to_numpy()
    hit = np.flatnonzero(rows_with(rt_corr, corr))  # the few runtime rows with a wanted id
    rt_pid = np.broadcast_to(runtime["pid"].to_numpy(), len(runtime))[hit]
    call_tid = np.broadcast_to(runtime["tid"].to_numpy(), len(runtime))[hit]
    call_start = runtime["start_ns"].to_numpy()[hit]
    first: dict[tuple, int] = {}
    for i, key in enumerate(zip(rt_pid.tolist(), rt_corr[hit].tolist(), strict=True)):
        first.setdefault(key, i)
    at = [first.get(key, -1) for key in zip(pid.tolist(), corr.tolist(), strict=True)]
    wanted = {(rt_pid[i], call_tid[i]) for i in at if i >= 0}
    threads = thread_ranges(ranges, wanted)
    out = []
    for i in at:
        if i < 0:
            out.append(None)
            continue
        on_thread = threads.get((rt_pid[i], call_tid[i]))
        out.append(on_thread.open_at(call_start[i]) if on_thread is not None else ())
    return out


def thread_ranges(ranges: pd.DataFrame, wanted: set) -> dict[tuple, OpenRanges]:
    """The ranges of each wanted (pid, tid), in start order (stable), as ``OpenRanges``."""
    pid, tid = ranges["pid"].to_numpy(), ranges["tid"].to_numpy()
    start, end, name = ranges["start_ns"].to_numpy(), ranges["end_ns"].to_numpy(), ranges["name"].to_numpy()
    out = {}
    for p, t in wanted:
        mine = np.flatnonzero((pid == p) & (tid == t))
        mine = mine[np.argsort(start[mine], kind="stable")]
        out[(p, t)] = OpenRanges(start[mine], end[mine], name[mine])
    return out


class OpenRanges:
    """One thread's ranges sorted by start, with the latest end in each block of BLOCK of them: the ranges open
    at a time are then looked for in the blocks that end after it, not among every range started before it
    (each sampled launch scanned up to 77k NVTX ranges: ~0.1 s of CPU on the 150-copy export,
    benchmarks/README.md, "Report speed")."""

    BLOCK = 64

    def __init__(self, start: np.ndarray, end: np.ndarray, name: np.ndarray):
        self.start, self.end, self.name = start, end, name
        heads = np.arange(0, len(end), self.BLOCK)
        self.block_end = np.maximum.reduceat(end, heads) if len(end) else end

    def open_at(self, t: int) -> tuple:
        """The names of the ranges started at or before ``t`` and ending after it, outermost first (by start,
        then the longest first; equal ones in row order)."""
        started = int(np.searchsorted(self.start, t, "right"))
        whole = started // self.BLOCK  # blocks whose ranges all started by t
        blocks = np.flatnonzero(self.block_end[:whole] > t)
        rows = np.concatenate(
            [(blocks[:, None] * self.BLOCK + np.arange(self.BLOCK)).ravel(), np.arange(whole * self.BLOCK, started)]
        )
        rows = rows[self.end[rows] > t]
        return tuple(self.name[rows[np.lexsort((-self.end[rows], self.start[rows]))]])


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
    names = names + 1  # a kernel without a name (code -1) is digit 0: no digit negative, no two windows one key
    base = int(names.max()) + 1
    if base**n < 2**63:
        key = names[:m].copy()
        for i in range(1, n):  # in place: no fresh million-row array per step
            key *= base
            key += names[i : i + m]
        return pd.factorize(key)[0].astype(np.int64, copy=False)
    key = names[:m]
    for i in range(1, n):  # one dense id per distinct (previous key, next name) pair
        key = pd.factorize(key * base + names[i : i + m])[0].astype(np.int64, copy=False)
    return key
