"""Launch statistics: how long the host takes to launch each GPU op, and how long the op waits after it.

Definitions follow Holistic Trace Analysis (HTA 0.5.0, ``CudaKernelAnalysis.cuda_kernel_launch_stats``):
the launch delay of an op is its GPU start minus the end of the runtime call that launched it (same
correlation id), clipped at 0; its launch CPU time is that call's duration. A short kernel runs for less
time on the GPU than its launch call took on the CPU (HTA: "GPU events with a shorter duration than the
corresponding CPU events"; TraceLens' short-kernel study): a stream of them keeps the GPU waiting on the
host however fast the GPU is. Outliers use HTA's default cut-offs (launch call over 50 us, delay over 100 us).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profiler_kit.analyze.idle import in_order, stream_sort
from profiler_kit.analyze.projection import launches
from profiler_kit.analyze.tables import one_value

# HTA's get_cuda_kernel_launch_stats looks only at these calls (nsys adds a version suffix: "_v7000").
HTA_LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")
RUNTIME_OUTLIER_NS = 50_000  # HTA runtime_cutoff default (50 us)
LAUNCH_DELAY_OUTLIER_NS = 100_000  # HTA launch_delay_cutoff default (100 us)

LAUNCH_COLUMNS = [
    "op_row",
    "pid",
    "tid",
    "device_id",
    "stream_id",
    "correlation_id",
    "is_kernel",
    "launch_call",
    "launch_start_ns",
    "launch_end_ns",
    "cpu_ns",
    "gpu_start_ns",
    "gpu_ns",
    "launch_delay_ns",
    "short",
]


def launch_table(ops: pd.DataFrame, runtime: pd.DataFrame, matched: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per GPU op matched to its launching runtime call (LAUNCH_COLUMNS).

    The match is ``analyze.projection.launches`` (pid and correlation id, first runtime row wins); the
    matched runtime rows' name, start and end are then read here. ``matched``: that match when already
    made, ``launches(ops, runtime, runtime_rows=True)`` (``analyze_trace`` makes it for the projection):
    matching a million ops again cost the diagnosis 0.03 s. Ops with no launch in the trace are left out.
    """
    if ops.empty or runtime.empty:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in LAUNCH_COLUMNS})
    if matched is None:
        matched = launches(ops[["correlation_id", "pid"]], runtime, runtime_rows=True)
    rt = matched["runtime_row"].to_numpy()
    op_row = matched["op_row"].to_numpy()
    start = _at(ops["start_ns"].to_numpy(), op_row)
    launch_start = matched["launch_start_ns"].to_numpy()
    launch_end = matched["launch_end_ns"].to_numpy()
    cpu = launch_end - launch_start
    gpu = _at(ops["duration_ns"].to_numpy(), op_row)
    names = runtime["name"]
    call = names.cat.codes.to_numpy()[rt] if isinstance(names.dtype, pd.CategoricalDtype) else None
    return pd.DataFrame(
        {
            "op_row": op_row,
            "pid": matched["pid"].to_numpy(),
            "tid": matched["tid"].to_numpy(),
            "device_id": _at(ops["device_id"].to_numpy(), op_row),
            "stream_id": _at(ops["stream_id"].to_numpy(), op_row),
            "correlation_id": _at(ops["correlation_id"].to_numpy(), op_row),
            "is_kernel": _at(ops["is_kernel"].to_numpy(dtype=bool), op_row),
            "launch_call": pd.Categorical.from_codes(call, names.cat.categories)
            if call is not None
            else pd.Categorical(names.to_numpy()[rt]),
            "launch_start_ns": launch_start,
            "launch_end_ns": launch_end,
            "cpu_ns": cpu,
            "gpu_start_ns": start,
            "gpu_ns": gpu,
            "launch_delay_ns": np.maximum(start - launch_end, 0),
            "short": gpu < cpu,
        },
        copy=False,
    )


def _at(values: np.ndarray, op_row: np.ndarray) -> np.ndarray:
    """``values[op_row]`` for the matched ops (rows in order): the column itself when every op was matched,
    the usual case, where the gather would copy it whole for nothing."""
    return values if len(op_row) == len(values) else values[op_row]


def base_call(names: pd.Series) -> pd.Series:
    """Runtime call names without nsys' version suffix ("cudaLaunchKernel_v7000" -> "cudaLaunchKernel")."""
    return names.astype(str).str.replace(r"_v\d+$", "", regex=True)


def short_excess(launched: pd.DataFrame) -> int:
    """The launch CPU time of the short ops (GPU time under their launch call's) beyond their GPU time, ns."""
    if launched.empty:
        return 0
    short = launched["short"].to_numpy(dtype=bool)
    return int((launched["cpu_ns"].to_numpy()[short] - launched["gpu_ns"].to_numpy()[short]).sum())


def summarize_launches(launched: pd.DataFrame) -> pd.DataFrame:
    """Per launching call: ops, launch CPU time and delay (total, mean, median, max), short ops and outliers."""
    cols = [
        "launch_call",
        "ops",
        "cpu_total_ns",
        "cpu_mean_ns",
        "cpu_median_ns",
        "gpu_total_ns",
        "delay_mean_ns",
        "delay_median_ns",
        "delay_max_ns",
        "short_ops",
        "short_frac",
        "cpu_outliers",
        "delay_outliers",
    ]
    if launched.empty:
        return pd.DataFrame(columns=cols)
    calls = pd.Categorical(launched["launch_call"])
    names = base_call(pd.Series(calls.categories))  # per distinct name, not per row
    group, labels = pd.factorize(names)
    n = len(labels)
    key = group.astype(np.int16 if n < 2**15 else np.int64)[calls.codes]
    ops = np.bincount(key, minlength=n)
    order, first = by_call(key, ops)  # call g's rows: first[g]:first[g] + ops[g] of the order
    cpu, gpu, delay = (in_order(launched[c].to_numpy(), order) for c in ("cpu_ns", "gpu_ns", "launch_delay_ns"))
    short = in_order(launched["short"].to_numpy(dtype=bool), order)
    ints = np.zeros((6, n), dtype=np.int64)  # cpu and gpu totals, delay total, short ops, outliers of each kind
    floats = np.full((3, n), np.nan)  # cpu and delay median, delay max
    for g in np.flatnonzero(ops):
        rows = slice(first[g], first[g] + ops[g])
        c, d = cpu[rows], delay[rows]
        ints[:, g] = (c.sum(), gpu[rows].sum(), d.sum(), np.count_nonzero(short[rows]),
                      np.count_nonzero(c > RUNTIME_OUTLIER_NS), np.count_nonzero(d > LAUNCH_DELAY_OUTLIER_NS))  # fmt: skip
        floats[:, g] = (np.median(c), np.median(d), np.max(d))
    per = np.maximum(ops, 1)  # names with no op (categories unused here) are dropped below
    out = pd.DataFrame(
        {
            "launch_call": labels,
            "ops": ops,
            "cpu_total_ns": ints[0],
            "cpu_mean_ns": ints[0].astype(float) / per,
            "cpu_median_ns": floats[0],
            "gpu_total_ns": ints[1],
            "delay_mean_ns": ints[2].astype(float) / per,
            "delay_median_ns": floats[1],
            "delay_max_ns": floats[2],
            "short_ops": ints[3],
            "cpu_outliers": ints[4],
            "delay_outliers": ints[5],
        }
    )
    out = out[out["ops"] > 0]
    out["short_frac"] = out["short_ops"] / out["ops"]
    return out.sort_values("cpu_total_ns", ascending=False, kind="stable")[cols].reset_index(drop=True)


def by_call(key: np.ndarray, ops: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """The rows grouped by launching call (``key``, ``ops`` rows of each) and where each call's rows begin there.

    Each call's rows then are one slice, whose sums, counts and median cost less than a mask, a copy and a
    float ``bincount`` per call and column. The order is None (rows as they are) when each call's rows already
    lie together (one call; kernels then copies, the usual export): the stable radix sort of the small call
    codes and the gathers of four columns by it cost the 150-copy export ~0.03 s of CPU (benchmarks/README.md,
    "Report speed").
    """
    heads = np.flatnonzero(key[1:] != key[:-1]) + 1  # where a run of one call begins, but the first
    if len(heads) + 1 == np.count_nonzero(ops):  # one run per call
        first = np.zeros(len(ops), dtype=np.int64)
        first[key[np.concatenate([[0], heads])]] = np.concatenate([[0], heads])
        return None, first
    return np.argsort(key, kind="stable"), np.concatenate([[0], np.cumsum(ops)[:-1]])


def by_launch_start(launched: pd.DataFrame) -> tuple[np.ndarray | None, np.ndarray]:
    """The launch rows in order of their call's start (None: already in that order) and the sorted starts.
    Only the starts are gathered: the phases then read their own launches' values, not a sorted copy of
    every column (six gathers of a million rows)."""
    starts = launched["launch_start_ns"].to_numpy()
    if not (starts[1:] < starts[:-1]).any():
        return None, starts
    order = np.argsort(starts, kind="stable")
    return order, starts[order]


# A phase is launch-bound when its launch calls keep the CPU busier than its ops keep the GPU
# (LAUNCH_BOUND_RATIO), or when most of its ops are shorter than their launch (SHORT_KERNEL_FRAC) and the
# GPU starts them about as soon as they are launched (median delay under SHALLOW_QUEUE_NS: no queue to
# hide the launch cost behind). With a deep queue short ops cost nothing: the GPU is the bottleneck.
LAUNCH_BOUND_RATIO = 1.0
SHORT_KERNEL_FRAC = 0.5
SHALLOW_QUEUE_NS = 10_000


def launch_phases(launched: pd.DataFrame, phases: pd.DataFrame) -> pd.DataFrame:
    """Per phase name (forward, backward, ProfilerStep#N...): the ops launched while it was open, on its process.

    Columns: phase, instances, ops, cpu_launch_ns (launch calls' time), gpu_ns (the ops' GPU time),
    short_frac, delay_median_ns, launch_over_gpu (cpu_launch_ns / gpu_ns) and verdict ("launch-bound"
    by the rule above LAUNCH_BOUND_RATIO, else "GPU-bound"; "no ops" when it launched none).
    """
    cols = [
        "phase",
        "instances",
        "ops",
        "cpu_launch_ns",
        "gpu_ns",
        "short_frac",
        "delay_median_ns",
        "launch_over_gpu",
        "verdict",
    ]
    if launched.empty or phases.empty:
        return pd.DataFrame(columns=cols)
    order, ls = by_launch_start(launched)
    lpid = launched["pid"].to_numpy()
    one_pid = one_value(lpid)  # one process (the usual case): no look at each launch's pid
    cpu, gpu = launched["cpu_ns"].to_numpy(), launched["gpu_ns"].to_numpy()
    short, delay = launched["short"].to_numpy(dtype=bool), launched["launch_delay_ns"].to_numpy()
    lo = np.searchsorted(ls, phases["start_ns"].to_numpy(), "left")
    hi = np.searchsorted(ls, phases["end_ns"].to_numpy(), "left")
    acc: dict[str, list] = {}
    names = phases["name"].astype(str).str.replace(r"#\d+$", "#N", regex=True)  # ProfilerStep#3 -> ProfilerStep#N
    for name, pid, a, b in zip(names, phases["pid"].to_numpy(), lo, hi, strict=True):
        inside = np.arange(a, b) if order is None else order[a:b]  # the launches that started while it was open
        own = (inside if lpid[0] == pid else inside[:0]) if one_pid else inside[lpid[inside] == pid]
        row = acc.setdefault(name, [0, []])
        row[0] += 1
        row[1].append(own)
    rows = []
    for name, (instances, parts) in acc.items():
        idx = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        c, g = int(cpu[idx].sum()), int(gpu[idx].sum())
        kern = len(idx)
        short_frac = float(short[idx].mean()) if kern else np.nan
        ratio = c / g if g else np.nan
        delay_median = float(np.median(delay[idx])) if kern else np.nan
        shallow = short_frac >= SHORT_KERNEL_FRAC and delay_median < SHALLOW_QUEUE_NS
        bound = kern > 0 and ((g > 0 and ratio >= LAUNCH_BOUND_RATIO) or shallow)
        rows.append(
            {
                "phase": name,
                "instances": instances,
                "ops": kern,
                "cpu_launch_ns": c,
                "gpu_ns": g,
                "short_frac": short_frac,
                "delay_median_ns": delay_median,
                "launch_over_gpu": ratio,
                "verdict": ("launch-bound" if bound else "GPU-bound") if kern else "no ops",
            }
        )
    return pd.DataFrame(rows, columns=cols)


HTA_QUEUE_CALLS = (*HTA_LAUNCH_CALLS, "cuLaunchKernel", "hipLaunchKernel", "hipExtModuleLaunchKernel")
MAX_QUEUE_LENGTH = 1024  # the CUDA launch queue depth HTA's get_time_spent_blocked_on_full_queue is given
QUEUE_COLUMNS = [
    "pid",
    "device_id",
    "stream_id",
    "ops",
    "max_length",
    "mean_length",
    "event_mean_length",
    "span_ns",
    "full_ns",
    "full_frac",
]


def _queue_stats(issued: np.ndarray, starts: np.ndarray, full_at: int) -> tuple[int, int, int, int, int]:
    """One stream's queue from its launch times and its ops' GPU starts (``starts`` sorted): the integral
    of the length over the span, the sum of the length after each event, the span, the time at
    ``full_at`` ops or more, and the longest queue.

    The length is a count (launches so far - starts so far), so each event's length is a rank of the two
    sorted arrays merged (``starts_before``, a launch counted before a start at the same time).
    """
    if (issued[1:] < issued[:-1]).any():  # a stream runs its ops in launch order: sorted but for ties and skew
        issued = np.sort(issued, kind="stable")
    n = len(starts)
    # after launch i: i + 1 launched, before[i] started. After start j: as many launched as launches at or
    # before it, j + 1 started. Each (launch, start) pair has its launch either after the start or at or
    # before it, so the starts' counts sum to n * n - sum(before): the sum over events needs no second count.
    before = starts_before(issued, starts)
    after_launch = np.arange(1, n + 1) - before
    events_sum = n * n - 2 * int(before.sum())
    # In the gap before start j (after start j - 1) j ops have started: the queue holds full_at or more
    # from the time launch j + full_at - 1 is issued.
    since = issued[full_at - 1 :].copy()
    if len(since) > 1:
        np.maximum(since[1:], starts[: len(since) - 1], out=since[1:])
    span = int(max(issued[-1], starts[-1]) - min(issued[0], starts[0]))
    full = starts[: len(since)] - since
    return (
        int((starts - issued).sum()),  # integral of the length: sum of starts - sum of launches, exactly
        events_sum,
        span,
        int(np.maximum(full, 0, out=full).sum()),
        int(after_launch.max()),
    )


def starts_before(issued: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """For two sorted arrays: how many ``starts`` lie strictly before each launch.

    A binary search per launch; numpy's search narrows each one from the previous result when the launches
    rise. On the 150-copy export, loaded VM (2026-11-27), it took 28-42 ms where one stable argsort of the
    two arrays end to end (a single merge in timsort) took 49-63 ms (benchmarks/README.md, "Report speed");
    an earlier measurement on a quiet VM had it the other way round.
    """
    return np.searchsorted(starts, issued, "left")


def queue_length(
    launched: pd.DataFrame,
    max_queue_length: int = MAX_QUEUE_LENGTH,
    streams: tuple[np.ndarray, int, np.ndarray | None] | None = None,
) -> pd.DataFrame:
    """Per stream, the ops launched and not yet started over time (HTA ``get_queue_length_time_series``).

    Each launch call's start adds one to its op's stream queue, the op's GPU start takes it off (HTA's
    definition: the queue holds what the host has issued and the GPU has not begun). ``mean_length`` is
    weighted by time, ``event_mean_length`` is the mean over change points (HTA's summary ``describe()``),
    ``full_ns`` the time the queue held ``max_queue_length`` ops or more (HTA's blocked-on-full-queue time:
    the host's next launch call then blocks) and ``full_frac`` its share of the stream's queue span.
    ``streams``: the launched rows' ``analyze.idle.stream_sort`` by (pid, device, stream) and GPU start when
    already computed (``analyze.idle.ops_streams`` when every op was launched: the same rows).
    """
    if launched.empty:
        return pd.DataFrame(columns=QUEUE_COLUMNS)
    n = len(launched)
    keys = [np.broadcast_to(launched[c].to_numpy(), n) for c in ("pid", "device_id", "stream_id")]
    code, m, order = streams if streams is not None else stream_sort(keys, launched["gpu_start_ns"].to_numpy())
    bounds = np.searchsorted(in_order(code, order), np.arange(m + 1))  # each stream's rows in ``order``
    starts = in_order(launched["gpu_start_ns"].to_numpy(), order)
    issued = in_order(launched["launch_start_ns"].to_numpy(), order)
    stats = np.array(
        [
            _queue_stats(issued[a:b], starts[a:b], max_queue_length)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ],
        dtype=np.int64,
    ).reshape(m, 5)
    held, events_sum, span, full, peak = stats.T
    row = bounds[:-1] if order is None else order[bounds[:-1]]  # a launched row of each stream (its first)
    ops = np.diff(bounds)
    out = pd.DataFrame(
        {
            "pid": keys[0][row],
            "device_id": keys[1][row],
            "stream_id": keys[2][row],
            "ops": ops,
            "max_length": peak,
            "mean_length": held / np.where(span > 0, span, np.nan),
            "event_mean_length": events_sum / (2 * ops),
            "span_ns": span,
            "full_ns": full,
        }
    )
    out["full_frac"] = out["full_ns"] / out["span_ns"].where(out["span_ns"] > 0)
    return out.sort_values("ops", ascending=False, kind="stable").reset_index(drop=True)[QUEUE_COLUMNS]
