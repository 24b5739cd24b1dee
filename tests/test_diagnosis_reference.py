"""The diagnosis' fast paths against slow, obviously-correct references: per-row Python loops kept here.

Each vectorized analysis (launch match reuse, stream order, idle time, queue length, launch summary, phase
verdicts, step windows, temporal breakdown) is compared with a loop over the rows that follows its
definition, on every real trace in ../shared/data and on hand-built and random edge cases (empty tables,
one stream, overlapping kernels, ops without a launch, ties, rows out of time order, several processes).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from profiler_kit.analyze.breakdown import analyze_trace, gpu_ops, op_ids, phase_ranges, summarize_trace
from profiler_kit.analyze.idle import (
    IDLE_CLASSES,
    KERNEL_WAIT_NS,
    idle_breakdown,
    ops_streams,
    stream_order,
    stream_sort,
)
from profiler_kit.analyze.intervals import union_length
from profiler_kit.analyze.launches import (
    LAUNCH_DELAY_OUTLIER_NS,
    RUNTIME_OUTLIER_NS,
    launch_table,
    queue_length,
    starts_before,
    summarize_launches,
)
from profiler_kit.analyze.projection import launches

from profiler_kit.build_findings import same_rows
from tests.conftest import shared_params

# --- references: one Python loop each, following the definitions in the modules' docstrings ----------------


def ref_launch_table(ops: pd.DataFrame, runtime: pd.DataFrame) -> pd.DataFrame:
    """Each op with the first runtime row of its (pid, correlation id); on the id alone when no op has a pid."""
    no_pid = bool((ops["pid"].to_numpy() < 0).all())
    first: dict = {}
    for r, (pid, cid) in enumerate(zip(runtime["pid"], runtime["correlation_id"], strict=True)):
        if cid >= 0:
            first.setdefault(cid if no_pid else (pid, cid), r)
    rt_start, rt_end, rt_pid, rt_tid = (runtime[c].tolist() for c in ("start_ns", "end_ns", "pid", "tid"))
    rt_name = runtime["name"].astype(str).tolist()
    rows = []
    for i, op in enumerate(ops.itertuples(index=False)):
        r = first.get(op.correlation_id if no_pid else (op.pid, op.correlation_id)) if op.correlation_id >= 0 else None
        if r is None:
            continue
        ls, le = rt_start[r], rt_end[r]
        rows.append(
            {
                "op_row": i,
                "pid": rt_pid[r],
                "tid": rt_tid[r],
                "device_id": op.device_id,
                "stream_id": op.stream_id,
                "correlation_id": op.correlation_id,
                "is_kernel": bool(op.is_kernel),
                "launch_call": rt_name[r],
                "launch_start_ns": ls,
                "launch_end_ns": le,
                "cpu_ns": le - ls,
                "gpu_start_ns": op.start_ns,
                "gpu_ns": op.duration_ns,
                "launch_delay_ns": max(op.start_ns - le, 0),
                "short": op.duration_ns < le - ls,
            }
        )
    return pd.DataFrame(rows, columns=list(launch_table(ops.iloc[:0], runtime.iloc[:0]).columns))


def ref_streams(ops: pd.DataFrame, times: str = "start_ns") -> tuple[list, dict]:
    """Rows of each (pid, device, stream), streams in order of first appearance, each stream's rows by (time, row)."""
    streams: dict = {}
    for i, key in enumerate(zip(ops["pid"], ops["device_id"], ops["stream_id"], strict=True)):
        streams.setdefault(tuple(int(k) for k in key), []).append(i)
    t = ops[times].to_numpy()
    return list(streams), {k: sorted(rows, key=lambda i: (t[i], i)) for k, rows in streams.items()}


def ref_idle(ops: pd.DataFrame, launched: pd.DataFrame, kernel_wait_ns: int = KERNEL_WAIT_NS) -> pd.DataFrame:
    """Walk each stream's ops in start order; each gap is one class (host_wait, kernel_wait, other)."""
    launch = dict(zip(launched["op_row"], launched["launch_start_ns"], strict=True))
    start, end = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    _, by_stream = ref_streams(ops)
    rows = []
    for key in sorted(by_stream):
        order = by_stream[key]
        acc = {c: [0, 0] for c in IDLE_CLASSES}
        for prev, op in zip(order[:-1], order[1:], strict=True):
            gap = max(int(start[op]) - int(end[prev]), 0)
            if op in launch and launch[op] > end[prev]:
                cls = "host_wait"
            elif gap < kernel_wait_ns:
                cls = "kernel_wait"
            else:
                cls = "other"
            acc[cls][0] += 1
            acc[cls][1] += gap
        total = sum(v[1] for v in acc.values())
        for cls in IDLE_CLASSES:
            gaps, idle = acc[cls]
            if gaps:
                rows.append([*key, cls, gaps, idle, idle / total if total else np.nan])
    return pd.DataFrame(rows, columns=["pid", "device_id", "stream_id", "idle_class", "gaps", "idle_ns", "idle_frac"])


def ref_queue(launched: pd.DataFrame, full_at: int) -> pd.DataFrame:
    """Per stream, walk the merged launch (+1) and GPU start (-1) events, a launch first at equal times."""
    streams, by_stream = ref_streams(launched, "gpu_start_ns")
    issued, started = launched["launch_start_ns"].tolist(), launched["gpu_start_ns"].tolist()
    rows = []
    for key in streams:
        idx = by_stream[key]
        events = sorted([(issued[i], 0) for i in idx] + [(started[i], 1) for i in idx])
        length, lengths = 0, []
        for _, kind in events:
            length += 1 if kind == 0 else -1
            lengths.append(length)
        held = sum(lengths[k] * (events[k + 1][0] - events[k][0]) for k in range(len(events) - 1))
        full = sum(events[k + 1][0] - events[k][0] for k in range(len(events) - 1) if lengths[k] >= full_at)
        span = events[-1][0] - events[0][0]
        rows.append(
            [*key, len(idx), max(lengths), held / span if span else np.nan, sum(lengths) / len(lengths), span, full]
        )
    cols = ["pid", "device_id", "stream_id", "ops", "max_length", "mean_length", "event_mean_length", "span_ns"]
    out = pd.DataFrame(rows, columns=[*cols, "full_ns"])
    out["full_frac"] = out["full_ns"] / out["span_ns"].where(out["span_ns"] > 0)
    return out.sort_values("ops", ascending=False, kind="stable").reset_index(drop=True)


def ref_summarize_launches(launched: pd.DataFrame) -> pd.DataFrame:
    """Per launching call (name without its _vNNNN suffix; calls in the order of the category list)."""
    calls = pd.Categorical(launched["launch_call"])
    base = {}
    for name in calls.categories:
        base.setdefault(re.sub(r"_v\d+$", "", str(name)), [])
    for i, code in enumerate(calls.codes):
        base[re.sub(r"_v\d+$", "", str(calls.categories[code]))].append(i)
    cpu, gpu, delay = (launched[c].to_numpy() for c in ("cpu_ns", "gpu_ns", "launch_delay_ns"))
    short = launched["short"].to_numpy(dtype=bool)
    rows = []
    for name, idx in base.items():
        if not idx:
            continue
        c, d = [int(cpu[i]) for i in idx], [int(delay[i]) for i in idx]
        rows.append(
            {
                "launch_call": name,
                "ops": len(idx),
                "cpu_total_ns": sum(c),
                "cpu_mean_ns": sum(c) / len(idx),
                "cpu_median_ns": float(np.median(c)),
                "gpu_total_ns": sum(int(gpu[i]) for i in idx),
                "delay_mean_ns": sum(d) / len(idx),
                "delay_median_ns": float(np.median(d)),
                "delay_max_ns": float(max(d)),
                "short_ops": sum(bool(short[i]) for i in idx),
                "short_frac": sum(bool(short[i]) for i in idx) / len(idx),
                "cpu_outliers": sum(x > RUNTIME_OUTLIER_NS for x in c),
                "delay_outliers": sum(x > LAUNCH_DELAY_OUTLIER_NS for x in d),
            }
        )
    out = pd.DataFrame(rows, columns=list(summarize_launches(launched.iloc[:0]).columns))
    return out.sort_values("cpu_total_ns", ascending=False, kind="stable").reset_index(drop=True)


# --- inputs ---------------------------------------------------------------------------------------------


def random_trace(seed: int, n: int, streams: int = 3, pids: int = 1, unmatched: float = 0.1, shuffle: bool = True):
    """Random ops and runtime rows: ties in every time, overlapping ops on a stream, ops without a launch
    (ids missing from the runtime or negative), duplicate runtime ids (the first row wins), rows out of order."""
    rng = np.random.default_rng(seed)
    start = np.sort(rng.integers(0, 50 * n + 1, n))
    dur = rng.integers(0, 400, n)
    ops = pd.DataFrame(
        {
            "start_ns": start,
            "end_ns": start + dur,
            "duration_ns": dur,
            "device_id": rng.integers(0, 2, n) if streams > 1 else np.zeros(n, dtype=np.int64),
            "stream_id": rng.integers(0, streams, n) + 7,
            "correlation_id": np.where(rng.random(n) < unmatched / 2, -1, np.arange(n) + 1),
            "pid": rng.integers(0, pids, n) + 100,
            "is_kernel": rng.random(n) < 0.9,
        }
    )
    if shuffle:
        ops = ops.sample(frac=1, random_state=seed).reset_index(drop=True)
    keep = rng.random(n) >= unmatched / 2
    cid = ops["correlation_id"].to_numpy()[keep]
    ls = ops["start_ns"].to_numpy()[keep] - rng.integers(-30, 3000, keep.sum())
    le = ls + rng.integers(0, 800, keep.sum())
    names = ["cudaLaunchKernel_v7000", "cudaLaunchKernel", "cudaMemcpyAsync_v3020", "cudaEventRecord"]
    runtime = pd.DataFrame(
        {
            "start_ns": ls,
            "end_ns": le,
            "duration_ns": le - ls,
            "name": pd.Categorical(rng.choice(names[:3], keep.sum()), categories=names),
            "pid": ops["pid"].to_numpy()[keep],
            "tid": rng.integers(1, 3, keep.sum()),
            "correlation_id": cid,
        }
    )
    dup = runtime.sample(frac=0.05, random_state=seed).assign(start_ns=lambda d: d["start_ns"] + 5)
    runtime = pd.concat([runtime, dup], ignore_index=True)
    return ops, runtime.sample(frac=1, random_state=seed + 1).reset_index(drop=True)


RANDOM = [
    dict(seed=1, n=400),
    dict(seed=2, n=300, streams=1),
    dict(seed=3, n=300, streams=1, shuffle=False, unmatched=0),
    dict(seed=4, n=500, streams=5, pids=3),
    dict(seed=5, n=2, streams=1),
    dict(seed=6, n=1, streams=1, unmatched=0),
    dict(seed=7, n=200, streams=2, unmatched=0.9),
]


def real_params():
    return shared_params("kineto", "*.json.gz") + shared_params("nsys_sqlite", "*.sqlite")


def _real(path):
    from profiler_kit.analyze.sources import discover, read_trace

    trace = read_trace(discover([path])[0])
    return trace, gpu_ops(trace)


def _check_launch_side(ops: pd.DataFrame, runtime: pd.DataFrame) -> None:
    """Every launch-table analysis against its reference, and the shared paths against the unshared."""
    ref = ref_launch_table(ops, runtime)
    launched = launch_table(ops, runtime)
    reused = launch_table(ops, runtime, launches(ops[["correlation_id", "pid"]], runtime, runtime_rows=True))
    pd.testing.assert_frame_equal(reused, launched)
    got = launched.assign(launch_call=launched["launch_call"].astype(str))
    pd.testing.assert_frame_equal(got.reset_index(drop=True), ref, check_dtype=False)

    expected_idle = ref_idle(ops, launched)
    for streams in (None, ops_streams(ops)):
        idle = idle_breakdown(ops, launched, streams=streams) if len(ops) else idle_breakdown(ops, launched)
        if len(expected_idle) or len(idle):
            pd.testing.assert_frame_equal(idle, expected_idle, check_dtype=False)

    if len(launched):
        for full_at in (1, 2, 5):
            expected_queue = ref_queue(launched, full_at)
            pd.testing.assert_frame_equal(queue_length(launched, full_at), expected_queue, check_dtype=False)
            if same_rows(ops, launched):  # as the diagnosis calls it: the ops' stream order
                shared = queue_length(launched, full_at, streams=ops_streams(ops))
                pd.testing.assert_frame_equal(shared, expected_queue, check_dtype=False)
        pd.testing.assert_frame_equal(summarize_launches(launched), ref_summarize_launches(launched), check_dtype=False)


# --- tests ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", RANDOM, ids=lambda c: f"seed{c['seed']}")
def test_launch_analyses_equal_the_loops_on_random_traces(case):
    _check_launch_side(*random_trace(**case))


@pytest.mark.parametrize("path", real_params())
def test_launch_analyses_equal_the_loops_on_real_traces(path):
    trace, ops = _real(path)
    _check_launch_side(ops, trace.runtime)


@pytest.mark.parametrize("path", real_params())
def test_analyze_trace_hands_over_the_launch_match(path):
    """analyze_trace's "launches" table is the match the diagnosis would make itself, with the runtime rows."""
    trace, ops = _real(path)
    got = analyze_trace(trace, ("summary", "launches"))
    assert list(got) == ["summary", "launches"]
    pd.testing.assert_frame_equal(got["launches"], launches(op_ids(trace), trace.runtime, runtime_rows=True))
    without = launches(op_ids(trace), trace.runtime)
    pd.testing.assert_frame_equal(got["launches"].drop(columns="runtime_row"), without)
    assert "launches" not in analyze_trace(trace, ("summary",))


def test_empty_tables():
    ops, runtime = random_trace(1, 10)
    empty_ops, empty_rt = ops.iloc[:0], runtime.iloc[:0]
    for o, r in [(empty_ops, runtime), (ops, empty_rt), (empty_ops, empty_rt)]:
        launched = launch_table(o, r)
        assert launched.empty and list(launched.columns) == list(launch_table(ops, runtime).columns)
        assert queue_length(launched).empty and summarize_launches(launched).empty
    assert idle_breakdown(empty_ops, launch_table(empty_ops, runtime)).empty
    ids_only = launches(ops[["correlation_id", "pid"]], runtime.assign(correlation_id=-1), runtime_rows=True)
    assert ids_only.empty and "runtime_row" in ids_only


def test_overlapping_kernels_on_one_stream():
    """Ops that overlap on their stream have gaps of 0 (kernel_wait): the same with rows out of order."""
    ops = pd.DataFrame(
        {
            "start_ns": [0, 50, 40, 300, 300],
            "end_ns": [100, 80, 200, 310, 305],
            "duration_ns": [100, 30, 160, 10, 5],
            "device_id": 0,
            "stream_id": 7,
            "correlation_id": [1, 2, 3, 4, 5],
            "pid": 1,
            "is_kernel": True,
        }
    )
    runtime = pd.DataFrame(
        {
            "start_ns": [-10, 20, 30, 250, 290],
            "end_ns": [-5, 25, 35, 260, 295],
            "duration_ns": 5,
            "name": pd.Categorical(["cudaLaunchKernel"] * 5),
            "pid": 1,
            "tid": 1,
            "correlation_id": [1, 2, 3, 4, 5],
        }
    )
    for frame in (ops, ops.iloc[::-1].reset_index(drop=True)):
        _check_launch_side(frame, runtime)
    idle = idle_breakdown(ops, launch_table(ops, runtime)).set_index("idle_class")
    # by start: [0,100) [40,200) [50,80) [300,310) [300,305); the gap before [300,310) is 300 - 80, launched at 250
    assert idle.loc["kernel_wait", "gaps"] == 3 and idle.loc["host_wait", "idle_ns"] == 220


@pytest.mark.parametrize("seed", range(20))
def test_stream_order_equals_a_sort_by_stream_time_and_row(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    keys = [np.full(n, 5), rng.integers(0, 2, n), rng.integers(0, int(rng.integers(1, 4)), n)]
    if seed % 3 == 0:  # rows already in (stream, time) order: the fast path
        order = np.lexsort((rng.integers(0, 50, n), keys[2], keys[1]))
        keys = [k[order] for k in keys]
    times = np.sort(rng.integers(0, 50, n)) if seed % 2 else rng.integers(0, 50, n)
    first: dict = {}
    code = np.array([first.setdefault(tuple(int(k[i]) for k in keys), len(first)) for i in range(n)])
    expected = sorted(range(n), key=lambda i: (code[i], times[i], i))
    got_code, m, order = stream_order(keys, times)
    assert m == len(first) and (got_code == code).all() and order.tolist() == expected
    _, _, maybe = stream_sort(keys, times)
    assert (np.arange(n) if maybe is None else maybe).tolist() == expected
    assert (maybe is None) == (expected == list(range(n)))


@pytest.mark.parametrize("seed", range(20))
def test_starts_before_equals_searchsorted(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 500))
    starts = np.sort(rng.integers(0, 100, n))
    issued = np.sort(starts - rng.integers(-20, 50, n))
    assert (starts_before(issued, starts) == np.searchsorted(starts, issued, "left")).all()


@pytest.mark.parametrize("path", real_params())
def test_phase_and_step_analyses_equal_the_loops_on_real_traces(path):
    from profiler_kit.analyze.idle import step_ranges, step_windows, temporal_breakdown
    from profiler_kit.analyze.launches import launch_phases

    trace, ops = _real(path)
    launched = launch_table(ops, trace.runtime)
    pd.testing.assert_frame_equal(launch_phases(launched, phase_ranges(trace.nvtx)), ref_launch_phases(launched, trace))
    steps = step_ranges(trace.nvtx)
    expected_steps = ref_step_ranges(trace.nvtx)
    pd.testing.assert_frame_equal(steps, expected_steps)
    pd.testing.assert_frame_equal(step_windows(steps, launched, ops), ref_step_windows(steps, launched, ops))
    expected_temporal = ref_temporal(ops)
    pd.testing.assert_frame_equal(temporal_breakdown(ops), expected_temporal, check_dtype=False)
    busy = int(summarize_trace(trace, ops)["gpu_busy_ns"].iloc[0])  # as the report hands it over
    pd.testing.assert_frame_equal(temporal_breakdown(ops, busy), expected_temporal, check_dtype=False)


def ref_step_ranges(nvtx: pd.DataFrame) -> pd.DataFrame:
    keep = [bool(re.match(r"^(ProfilerStep#\d+|step)$", str(n))) for n in nvtx["name"]]
    return nvtx[np.array(keep, dtype=bool)].sort_values(["pid", "start_ns"], kind="stable")


def ref_launch_phases(launched: pd.DataFrame, trace) -> pd.DataFrame:
    """Per phase name: the ops whose launch call started while an instance was open, on its process."""
    from profiler_kit.analyze.launches import LAUNCH_BOUND_RATIO, SHALLOW_QUEUE_NS, SHORT_KERNEL_FRAC

    phases = phase_ranges(trace.nvtx)
    cols = ["phase", "instances", "ops", "cpu_launch_ns", "gpu_ns", "short_frac", "delay_median_ns"]
    if launched.empty or phases.empty:
        return pd.DataFrame(columns=[*cols, "launch_over_gpu", "verdict"])
    acc: dict = {}
    rows = list(launched.itertuples(index=False))
    for ph in phases.itertuples(index=False):
        name = re.sub(r"#\d+$", "#N", str(ph.name))
        inst = acc.setdefault(name, [0, []])
        inst[0] += 1
        inst[1] += [r for r in rows if ph.start_ns <= r.launch_start_ns < ph.end_ns and r.pid == ph.pid]
    out = []
    for name, (instances, mine) in acc.items():
        c, g = sum(r.cpu_ns for r in mine), sum(r.gpu_ns for r in mine)
        short = float(np.mean([r.short for r in mine])) if mine else np.nan
        median = float(np.median([r.launch_delay_ns for r in mine])) if mine else np.nan
        ratio = c / g if g else np.nan
        bound = bool(mine) and (
            (g > 0 and ratio >= LAUNCH_BOUND_RATIO) or (short >= SHORT_KERNEL_FRAC and median < SHALLOW_QUEUE_NS)
        )
        verdict = ("launch-bound" if bound else "GPU-bound") if mine else "no ops"
        out.append([name, instances, len(mine), c, g, short, median, ratio, verdict])
    return pd.DataFrame(out, columns=[*cols, "launch_over_gpu", "verdict"])


def ref_step_windows(steps: pd.DataFrame, launched: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    cols = ["pid", "device_id", "step", "start_ns", "end_ns"]
    if steps.empty or launched.empty:
        return pd.DataFrame(columns=cols)
    rows = list(launched.itertuples(index=False))
    out = []
    for st in steps.itertuples(index=False):
        mine = [r.op_row for r in rows if st.start_ns <= r.launch_start_ns < st.end_ns and r.pid == st.pid]
        for d in sorted({int(ops["device_id"].iat[i]) for i in mine}):
            on = [i for i in mine if ops["device_id"].iat[i] == d]
            out.append(
                [int(st.pid), d, str(st.name), int(ops["start_ns"].iloc[on].min()), int(ops["end_ns"].iloc[on].max())]
            )
    df = (
        pd.DataFrame(out, columns=cols)
        .sort_values(["pid", "device_id", "start_ns"], kind="stable")
        .reset_index(drop=True)
    )
    for i in range(len(df) - 1):  # each window ends where the next one of its GPU starts
        if (df.at[i, "pid"], df.at[i, "device_id"]) == (df.at[i + 1, "pid"], df.at[i + 1, "device_id"]):
            df.at[i, "end_ns"] = df.at[i + 1, "start_ns"]
    return df


def ref_temporal(ops: pd.DataFrame) -> pd.DataFrame:
    """Per (pid, device): unions by a sweep over the sorted intervals."""
    from profiler_kit.analyze.idle import TEMPORAL_COLUMNS

    if ops.empty:
        return pd.DataFrame(columns=TEMPORAL_COLUMNS)
    comm = ops["category"].astype(str).eq("communication").to_numpy() & ops["is_kernel"].to_numpy(dtype=bool)
    compute = ops["is_kernel"].to_numpy(dtype=bool) & ~comm
    out = []
    seen: dict = {}
    for i, key in enumerate(zip(ops["pid"], ops["device_id"], strict=True)):
        seen.setdefault((int(key[0]), int(key[1])), []).append(i)
    s, e = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()

    def union(idx):
        merged = []
        for a, b in sorted((int(s[i]), int(e[i])) for i in idx):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        return merged

    for (pid, dev), idx in seen.items():
        span = int(e[idx].max() - s[idx].min())
        busy = sum(b - a for a, b in union(idx))
        comp = union([i for i in idx if compute[i]])
        com = union([i for i in idx if comm[i]])
        overlap = sum(max(0, min(b, d) - max(a, c)) for a, b in comp for c, d in com)
        comp_ns, comm_ns = sum(b - a for a, b in comp), sum(b - a for a, b in com)
        out.append([pid, dev, span, busy, comp_ns, busy - comp_ns, span - busy, comm_ns, comm_ns - overlap])
    df = pd.DataFrame(out, columns=TEMPORAL_COLUMNS[:9])
    for part in ("compute", "non_compute", "idle"):
        df[f"{part}_frac"] = df[f"{part}_ns"] / df["span_ns"].where(df["span_ns"] > 0)
    assert df["busy_ns"].sum() == sum(union_length(s[idx], e[idx]) for idx in seen.values())
    return df[TEMPORAL_COLUMNS]


def ref_copy_bandwidth(memops: pd.DataFrame) -> pd.DataFrame:
    """Per memcpy name in order of first appearance (copies without a name in no row)."""
    from profiler_kit.analyze.copies import CEILING_MIN_BYTES, COPY_COLUMNS

    acc: dict = {}
    for m in memops.itertuples(index=False):
        if m.kind != "memcpy" or pd.isna(m.name):
            continue
        row = acc.setdefault(str(m.name), [0, 0, 0, np.nan])
        row[0] += 1
        row[1] += max(m.size_bytes, 0)
        row[2] += m.duration_ns
        if m.duration_ns > 0 and m.size_bytes >= CEILING_MIN_BYTES:
            row[3] = np.nanmax([row[3], m.size_bytes / m.duration_ns])
    if not acc:
        return pd.DataFrame(columns=COPY_COLUMNS)
    out = pd.DataFrame([[k, *v] for k, v in acc.items()], columns=["kind", "copies", "bytes", "total_ns", "ceiling"])
    out["gb_per_s"] = out["bytes"] / out["total_ns"].where(out["total_ns"] > 0)
    out["ceiling_gb_per_s"] = out["ceiling"]
    out["of_ceiling_frac"] = out["gb_per_s"] / out["ceiling_gb_per_s"]
    return out.sort_values("total_ns", ascending=False, kind="stable")[COPY_COLUMNS].reset_index(drop=True)


@pytest.mark.parametrize("path", real_params())
def test_copy_bandwidth_equals_the_loop_on_real_traces(path):
    from profiler_kit.analyze.copies import copy_bandwidth

    trace, _ = _real(path)
    pd.testing.assert_frame_equal(copy_bandwidth(trace.memops), ref_copy_bandwidth(trace.memops), check_dtype=False)


def test_copy_bandwidth_and_step_names_with_missing_names():
    from profiler_kit.analyze.copies import copy_bandwidth
    from profiler_kit.analyze.idle import matching, step_ranges

    names = [None, "[CUDA memcpy Device-to-Host]", "[CUDA memcpy Host-to-Device]", "[CUDA memcpy Device-to-Host]"]
    memops = pd.DataFrame(
        {
            "name": pd.Categorical(names, categories=sorted(n for n in set(names) if n) + ["unused"]),
            "kind": pd.Categorical(["memcpy", "memcpy", "memcpy", "memset"]),
            "size_bytes": [1 << 21, 1 << 20, 10, 1 << 22],
            "duration_ns": [100, 200, 0, 50],
        }
    )
    got = copy_bandwidth(memops)
    pd.testing.assert_frame_equal(got, ref_copy_bandwidth(memops), check_dtype=False)
    assert got["kind"].tolist() == ["[CUDA memcpy Device-to-Host]", "[CUDA memcpy Host-to-Device]"]
    nvtx = pd.DataFrame(
        {"name": pd.Categorical(["ProfilerStep#2", None, "step", "steps", "ProfilerStep#1"]), "pid": 1}
        | {"start_ns": [5, 1, 3, 2, 0]}
    )
    expected = [True, False, True, False, True]
    assert matching(nvtx["name"], re.compile(r"^(ProfilerStep#\d+|step)$")).tolist() == expected
    assert matching(nvtx["name"].astype(object), re.compile(r"^(ProfilerStep#\d+|step)$")).tolist() == expected
    assert step_ranges(nvtx)["start_ns"].tolist() == [0, 3, 5]


@pytest.mark.parametrize("descending", [False, True])
def test_launch_summary_of_rows_grouped_by_call(descending):
    """Rows that come one call after another (kernels then copies, as an export stores them), in the calls'
    code order or not: read as slices, no sort; the same table as the loop's."""
    ops, runtime = random_trace(11, 600, streams=2)
    launched = launch_table(ops, runtime)
    codes = pd.Categorical(launched["launch_call"]).codes
    grouped = launched.iloc[np.argsort(-codes if descending else codes, kind="stable")].reset_index(drop=True)
    assert len(np.unique(codes)) > 1
    pd.testing.assert_frame_equal(summarize_launches(grouped), ref_summarize_launches(grouped), check_dtype=False)
