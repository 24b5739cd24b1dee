"""Where the GPU's time goes between its first and last op: compute, non-compute, idle; and why it was idle.

Temporal breakdown (HTA ``get_temporal_breakdown``): per process and GPU, over the span from its first
GPU op's start to its last op's end: busy = union of every op (kernels, memcpy, memset); compute = union
of the kernels that are not communication; non-compute = busy - compute (memcpy/memset and communication
not overlapped by compute); idle = span - busy. Communication hidden under compute is reported apart
(``comm_exposed_ns`` is communication time with no compute kernel running).

Idle breakdown per stream (HTA ``get_idle_time_breakdown``, its definitions): each gap between an op and
the previous op on the same stream (start minus the previous end) is one idle interval, counted whole in
one class:

- host_wait: the runtime call that launched the op started after the previous op ended: the GPU had
  nothing queued because the host had not issued the op yet;
- kernel_wait: otherwise, when the gap is shorter than ``kernel_wait_ns`` (HTA: 30, in its microseconds): the back-to-back
  launch overhead of the GPU itself;
- other: every other gap: the op was queued but waited, on another stream (event waits), a
  synchronization, or a copy engine.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from profiler_kit.analyze.intervals import interval_union, union_length
from profiler_kit.analyze.tables import one_value

NON_COMPUTE_CATEGORIES = ("communication",)  # kernels that do not compute (memcpy/memset are not kernels)
KERNEL_WAIT_NS = (
    30_000  # HTA consecutive_kernel_delay=30 (documented as ns, compared with its microsecond times: 30 us)
)
IDLE_CLASSES = ("host_wait", "kernel_wait", "other")
STEP_RANGE = re.compile(r"^(ProfilerStep#\d+|step)$")  # Kineto's steps, the workloads' NVTX "step"

TEMPORAL_COLUMNS = [
    "pid",
    "device_id",
    "span_ns",
    "busy_ns",
    "compute_ns",
    "non_compute_ns",
    "idle_ns",
    "comm_ns",
    "comm_exposed_ns",
    "compute_frac",
    "non_compute_frac",
    "idle_frac",
]


def _overlap(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray) -> int:
    """Time covered by both of two sets of disjoint sorted intervals."""
    if not len(a_s) or not len(b_s):
        return 0
    # each B interval against the A intervals it can touch: cumulative coverage of A evaluated at B's ends
    cum = np.concatenate([[0], np.cumsum(a_e - a_s)])

    def covered(t: np.ndarray) -> np.ndarray:  # A time before t
        i = np.searchsorted(a_s, t, "right")  # A intervals starting at or before t
        full = cum[np.maximum(i - 1, 0)]
        part = np.where(i > 0, np.minimum(t, a_e[np.maximum(i - 1, 0)]) - a_s[np.maximum(i - 1, 0)], 0)
        return full + np.maximum(part, 0)

    return int((covered(b_e) - covered(b_s)).sum())


def _breakdown(
    starts, ends, compute, comm, lo: int | None = None, hi: int | None = None, busy: int | None = None
) -> dict:
    """The breakdown of one GPU's ops (arrays), optionally clipped to the window [lo, hi); ``busy``: the union of
    the ops' intervals when already known (unclipped only)."""
    if lo is not None:
        starts, ends = np.clip(starts, lo, hi), np.clip(ends, lo, hi)
    span = int(ends.max() - starts.min()) if lo is None else int(hi - lo)
    busy = union_length(starts, ends) if busy is None or lo is not None else busy
    if not comm.any():  # no communication (one GPU): the compute time alone, with no interval of its union built
        comp = union_length(masked(starts, compute), masked(ends, compute)) if not compute.all() else busy
        return {"span_ns": span, "busy_ns": busy, "compute_ns": comp, "non_compute_ns": busy - comp} | {
            "idle_ns": span - busy,
            "comm_ns": 0,
            "comm_exposed_ns": 0,
        }
    c_s, c_e = interval_union(starts[compute], ends[compute])
    m_s, m_e = interval_union(starts[comm], ends[comm])
    comp = int((c_e - c_s).sum())
    comm_ns = int((m_e - m_s).sum())
    return {
        "span_ns": span,
        "busy_ns": busy,
        "compute_ns": comp,
        "non_compute_ns": busy - comp,
        "idle_ns": span - busy,
        "comm_ns": comm_ns,
        "comm_exposed_ns": comm_ns - _overlap(c_s, c_e, m_s, m_e),
    }


def masked(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``values[mask]``, as a slice when the mask holds the first rows only (the kernels come first in
    ``gpu_ops``, the memcpy/memset rows after them): no gathered copy of a million rows."""
    k = np.count_nonzero(mask)
    return values[:k] if k and mask[:k].all() else values[mask]


def _fracs(df: pd.DataFrame) -> pd.DataFrame:
    span = df["span_ns"].where(df["span_ns"] > 0)
    for part in ("compute", "non_compute", "idle"):
        df[f"{part}_frac"] = df[f"{part}_ns"] / span
    return df


def _masks(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    is_kernel = ops["is_kernel"].to_numpy(dtype=bool)
    comm = in_categories(ops["category"], NON_COMPUTE_CATEGORIES)
    return is_kernel & ~comm, is_kernel & comm


def in_categories(values: pd.Series, wanted: tuple[str, ...]) -> np.ndarray:
    """``values.isin(wanted)`` as a bool array; for a categorical column, the few categories are looked up and
    their verdict read through the codes (one gather of a million small codes, no hash of each row)."""
    if not isinstance(values.dtype, pd.CategoricalDtype):
        return np.asarray(values.isin(wanted), dtype=bool)
    hit = np.append(np.asarray(values.cat.categories.isin(wanted), dtype=bool), False)  # code -1 (missing): False
    return hit[values.cat.codes.to_numpy()]


def temporal_breakdown(ops: pd.DataFrame, busy_ns: int | None = None) -> pd.DataFrame:
    """Per (pid, device_id): span, busy, compute, non-compute and idle time (TEMPORAL_COLUMNS).

    ``ops`` is ``analyze.breakdown.gpu_ops(trace)`` (kernels and memcpy/memset with their category).
    ``busy_ns``: the union of every op's interval when the overview already measured it
    (``analyze.breakdown.busy_time_ns``, its gpu_busy_ns), taken when the ops are one process on one GPU:
    the union's two sorts of a million times cost the 150-copy export ~0.02 s of CPU a second time
    (benchmarks/README.md, "Report speed").
    """
    if ops.empty:
        return pd.DataFrame(columns=TEMPORAL_COLUMNS)
    compute, comm = _masks(ops)
    starts, ends = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    rows = []
    for (pid, dev), idx in _groups(ops, ["pid", "device_id"]):
        known = busy_ns if isinstance(idx, slice) else None  # slice(None): one group, every op
        part = _breakdown(starts[idx], ends[idx], compute[idx], comm[idx], busy=known)
        rows.append({"pid": pid, "device_id": dev, **part})
    return _fracs(pd.DataFrame(rows))[TEMPORAL_COLUMNS]


def _groups(df: pd.DataFrame, keys: list[str]):
    """(key tuple, row positions) per distinct value of ``keys`` (columns may be views of one value). One
    group (one process, one GPU) comes as ``slice(None)``: its columns are then read as views, not gathered."""
    values = [np.asarray(df[k].to_numpy()) for k in keys]
    if all(one_value(v) for v in values):
        yield tuple(int(v[0]) for v in values), slice(None)
        return
    codes = pd.MultiIndex.from_arrays(values).factorize() if len(keys) > 1 else pd.factorize(values[0])
    labels, uniques = codes
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(len(uniques) + 1))
    for i, key in enumerate(uniques):
        key = key if isinstance(key, tuple) else (key,)
        yield tuple(int(k) for k in key), order[bounds[i] : bounds[i + 1]]


def step_ranges(nvtx: pd.DataFrame) -> pd.DataFrame:
    """The CPU ranges that mark training steps (STEP_RANGE), in time order per process."""
    steps = nvtx[matching(nvtx["name"], STEP_RANGE)]
    return steps.sort_values(["pid", "start_ns"], kind="stable")


def matching(names: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """Which names match ``pattern`` (missing ones never), as a bool array; for a categorical column each
    distinct name is matched once and the verdict read through the codes, not 77k names made strings."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return names.astype(str).str.match(pattern).to_numpy(dtype=bool)
    hit = np.asarray(names.cat.categories.astype(str).str.match(pattern), dtype=bool)
    return np.append(hit, False)[names.cat.codes.to_numpy()]  # code -1 (missing) reads the appended False


def step_windows(steps: pd.DataFrame, launched: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """The GPU window of each step: from the first GPU start of the ops launched while the step was open
    (on its process) to the next step's first start; the last step ends at the last end of its ops.

    Consecutive windows thus tile the GPU timeline with no overlap, however far the GPU lags the CPU.
    Columns: pid, device_id, step (range name), start_ns, end_ns. Steps that launched nothing are left out.
    """
    cols = ["pid", "device_id", "step", "start_ns", "end_ns"]
    if steps.empty or launched.empty:
        return pd.DataFrame(columns=cols)
    order = np.argsort(launched["launch_start_ns"].to_numpy(), kind="stable")
    ls = launched["launch_start_ns"].to_numpy()[order]
    lpid = launched["pid"].to_numpy()[order]
    rows = launched["op_row"].to_numpy()[order]
    gstart, gend = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    dev = ops["device_id"].to_numpy()
    lo = np.searchsorted(ls, steps["start_ns"].to_numpy(), "left")
    hi = np.searchsorted(ls, steps["end_ns"].to_numpy(), "left")
    out = []
    for name, pid, a, b in zip(steps["name"].astype(str), steps["pid"].to_numpy(), lo, hi, strict=True):
        own = rows[a:b][lpid[a:b] == pid]
        for d in np.unique(dev[own]):
            mine = own[dev[own] == d]
            out.append([int(pid), int(d), name, int(gstart[mine].min()), int(gend[mine].max())])
    df = pd.DataFrame(out, columns=cols).sort_values(["pid", "device_id", "start_ns"], kind="stable")
    nxt = df.groupby(["pid", "device_id"])["start_ns"].shift(-1, fill_value=-1).to_numpy()  # int64: no float
    df["end_ns"] = np.where(nxt >= 0, nxt, df["end_ns"].to_numpy())
    return df.reset_index(drop=True)


def temporal_by_step(ops: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """The temporal breakdown inside each step's GPU window (``step_windows``): ops clipped to it."""
    cols = ["pid", "device_id", "step", *TEMPORAL_COLUMNS[2:]]
    if ops.empty or windows.empty:
        return pd.DataFrame(columns=cols)
    compute, comm = _masks(ops)
    starts, ends = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    rows = []
    for (pid, dev), idx in _groups(ops, ["pid", "device_id"]):
        w = windows[(windows["pid"] == pid) & (windows["device_id"] == dev)]
        if w.empty:
            continue
        idx = np.arange(len(ops))[idx]  # positions, also for one group (a slice)
        order = idx[np.argsort(starts[idx], kind="stable")]
        s = starts[order]
        longest = int((ends[order] - s).max())
        for step, lo, hi in zip(w["step"], w["start_ns"].to_numpy(), w["end_ns"].to_numpy(), strict=True):
            a, b = np.searchsorted(s, lo - longest, "left"), np.searchsorted(s, hi, "left")
            sel = order[a:b]
            sel = sel[ends[sel] > lo]
            if not len(sel):
                continue
            part = _breakdown(starts[sel], ends[sel], compute[sel], comm[sel], int(lo), int(hi))
            rows.append({"pid": pid, "device_id": dev, "step": step, **part})
    return _fracs(pd.DataFrame(rows, columns=cols[:3] + TEMPORAL_COLUMNS[2:9]))[cols]


def stream_order(keys: list[np.ndarray], times: np.ndarray | None) -> tuple[np.ndarray, int, np.ndarray | None]:
    """One integer code per distinct row of ``keys`` (pid, device, stream), their number, and the rows in
    order of (code, time): sorted by time first (timsort: a trace's rows come nearly in order), then stably
    by code (a radix sort on small integers). Much faster than ``np.lexsort`` on a million rows.
    ``times`` None: the codes only (order None)."""
    code, n_codes, order = stream_sort(keys, times)
    if times is not None and order is None:
        order = np.arange(len(code))
    return code, n_codes, order


def stream_sort(keys: list[np.ndarray], times: np.ndarray | None) -> tuple[np.ndarray, int, np.ndarray | None]:
    """``stream_order``, but None for the order when the rows already come in (code, time) order: one stream
    after another, each in time order (a single-stream trace, kernels then copies), where the callers then
    read the columns as they are instead of gathering a million rows by an order that changes nothing."""
    n = len(keys[0])
    varying = [np.asarray(k) for k in keys if not one_value(k)]
    if not varying:  # one stream: the order is by time alone (no look at the codes, all 0)
        code = np.zeros(n, dtype=np.int64)
        if times is None or not (times[1:] < times[:-1]).any():
            return code, 1, None
        return code, 1, np.argsort(times, kind="stable")
    if len(varying) == 1:
        code, uniques = pd.factorize(varying[0])
        n_codes = len(uniques)
    else:
        code, uniques = pd.MultiIndex.from_arrays(varying).factorize()
        n_codes = len(uniques)
    if times is None or in_stream_order(code, times):
        return code, n_codes, None
    by_time = np.argsort(times, kind="stable")
    if n_codes == 1:
        return code, n_codes, by_time
    small = code.astype(np.int16) if n_codes < 2**15 else code
    return code, n_codes, by_time[np.argsort(small[by_time], kind="stable")]


def in_stream_order(code: np.ndarray, times: np.ndarray) -> bool:
    """Rows sorted by (code, time) already: codes never fall and times never fall within a code
    (two comparisons of neighbours, a few ms on a million rows, where the sorts and gathers take tens)."""
    if len(code) < 2:
        return True
    if (code[1:] < code[:-1]).any():
        return False
    falls = times[1:] < times[:-1]
    return not (falls.any() and (falls & (code[1:] == code[:-1])).any())


def in_order(values: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """``values[order]``, or ``values`` itself when ``order`` is None (``stream_sort``: rows in order)."""
    return values if order is None else values[order]


IDLE_COLUMNS = ["pid", "device_id", "stream_id", "idle_class", "gaps", "idle_ns", "idle_frac"]


def idle_breakdown(
    ops: pd.DataFrame,
    launched: pd.DataFrame,
    kernel_wait_ns: int = KERNEL_WAIT_NS,
    streams: tuple[np.ndarray, int, np.ndarray | None] | None = None,
) -> pd.DataFrame:
    """Per stream, the idle time between its consecutive ops by class (IDLE_CLASSES, HTA's definitions).

    ``launched`` is ``analyze.launches.launch_table(ops, runtime)``: an op with no launch in the trace is
    never host_wait. ``idle_frac`` is the class's share of the stream's idle time. Negative gaps (ops
    overlapping on one stream, which a trace should not hold) count as 0. ``streams``: ``ops_streams(ops)``
    when already computed (the queue length shares it).
    """
    if ops.empty:
        return pd.DataFrame(columns=IDLE_COLUMNS)
    n = len(ops)
    keys = [np.broadcast_to(ops[c].to_numpy(), n) for c in ("pid", "device_id", "stream_id")]
    code, n_codes, order = streams if streams is not None else ops_streams(ops)
    c, start = in_order(code, order), in_order(ops["start_ns"].to_numpy(), order)
    end, ls = in_order(ops["end_ns"].to_numpy(), order), in_order(launch_starts(launched, n), order)
    # the ordered rows hold each stream's ops as one block: the gaps of a stream are those inside its block
    bounds = np.searchsorted(c, np.arange(n_codes + 1)) if n_codes > 1 else np.array([0, n])
    gaps = np.zeros(3 * n_codes, dtype=np.int64)  # per stream: host_wait, kernel_wait, other
    idle = np.zeros(3 * n_codes, dtype=np.int64)
    for g in range(n_codes):
        a, b = bounds[g], bounds[g + 1]
        gaps[3 * g : 3 * g + 3], idle[3 * g : 3 * g + 3] = _gap_classes(start[a:b], end[a:b], ls[a:b], kernel_wait_ns)
    kept = np.flatnonzero(gaps)
    first = bounds[:-1] if order is None else order[bounds[:-1]]  # a row of each stream, for its keys
    rows = first[kept // 3]
    out = pd.DataFrame(
        {
            "pid": np.broadcast_to(keys[0], n)[rows],
            "device_id": np.broadcast_to(keys[1], n)[rows],
            "stream_id": np.broadcast_to(keys[2], n)[rows],
            "idle_class": np.asarray(IDLE_CLASSES)[kept % 3],
            "gaps": gaps[kept],
            "idle_ns": idle[kept].astype(np.int64),
        }
    )
    total = idle.reshape(n_codes, 3).sum(axis=1)[kept // 3]  # the stream's idle ns (a groupby: ~3 ms of pandas)
    out["idle_frac"] = out["idle_ns"].to_numpy() / np.where(total > 0, total, np.nan)
    return out.sort_values(["pid", "device_id", "stream_id"], kind="stable").reset_index(drop=True)[IDLE_COLUMNS]


def _gap_classes(start: np.ndarray, end: np.ndarray, launch: np.ndarray, kernel_wait_ns: int) -> tuple[list, list]:
    """One stream's ops in start order: the gaps and idle ns of each class (host_wait, kernel_wait, other).
    Counted and summed through masks (int64 sums, exact), where a class code per gap and two ``bincount``s
    (one over a float copy of every gap) cost twice as much."""
    prev_end = end[:-1]  # the gap before op i + 1 follows op i
    gap = np.subtract(start[1:], prev_end)
    np.maximum(gap, 0, out=gap)
    host = launch[1:] > prev_end  # launched after the previous op ended
    short = gap < kernel_wait_ns
    short &= ~host  # kernel_wait: queued, a short gap
    other = ~(host | short)
    masks = (host, short, other)
    return [np.count_nonzero(m) for m in masks], [int(gap.sum(where=m)) for m in masks]


def ops_streams(ops: pd.DataFrame) -> tuple[np.ndarray, int, np.ndarray | None]:
    """``stream_sort`` of the ops by (pid, device, stream) and start: computed once for the idle time and the
    queue length (``analyze.launches.queue_length``), which order the same rows the same way."""
    n = len(ops)
    keys = [np.broadcast_to(ops[c].to_numpy(), n) for c in ("pid", "device_id", "stream_id")]
    return stream_sort(keys, ops["start_ns"].to_numpy())


def launch_starts(launched: pd.DataFrame, n: int) -> np.ndarray:
    """The launch call's start of each of the ``n`` ops (int64 min where none was matched): the launch table's
    column itself when every op was matched (its op_row is then 0..n-1), with no fresh array to fill."""
    op_row = launched["op_row"].to_numpy()
    if len(op_row) == n and n > 0 and op_row[0] == 0 and op_row[-1] == n - 1:  # rows rise: 0..n-1
        return launched["launch_start_ns"].to_numpy()
    launch_start = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    if len(launched):
        launch_start[op_row] = launched["launch_start_ns"].to_numpy()
    return launch_start


def idle_totals(idle: pd.DataFrame) -> pd.DataFrame:
    """Idle time per class summed over streams: idle_class, gaps, idle_ns, idle_frac (of all stream idle)."""
    g = idle.groupby("idle_class", sort=False)
    out = pd.DataFrame({"gaps": g["gaps"].sum(), "idle_ns": g["idle_ns"].sum()}).reindex(IDLE_CLASSES, fill_value=0)
    total = out["idle_ns"].sum()
    out["idle_frac"] = out["idle_ns"] / total if total else np.nan
    return out.rename_axis("idle_class").reset_index()
