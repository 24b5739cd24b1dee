"""The "why is it slow" part of each trace's report section: ranked findings, then the tables behind them.

``diagnose`` runs the analyses (analyze.idle, analyze.launches, analyze.copies, analyze.findings) on one
trace's normalized tables and returns their tables by name; ``findings_text`` and ``findings_section``
word and lay them out. No number is computed here.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Executor, ThreadPoolExecutor

import numpy as np
import pandas as pd

from profiler_kit.analyze.arrays import distinct_values
from profiler_kit.analyze.breakdown import Job, phase_ranges, taken_back
from profiler_kit.analyze.collectives import (
    collective_bandwidth,
    collective_instances,
    comm_kernels,
    launch_steps,
    slowest_rank_by_step,
    stragglers,
    summarize_bandwidth,
    summarize_collectives,
)
from profiler_kit.analyze.copies import copy_bandwidth
from profiler_kit.analyze.findings import rank_findings
from profiler_kit.analyze.idle import (
    idle_breakdown,
    idle_totals,
    ops_streams,
    step_ranges,
    step_windows,
    temporal_breakdown,
    temporal_by_step,
)
from profiler_kit.analyze.launches import (
    MAX_QUEUE_LENGTH,
    launch_phases,
    launch_table,
    queue_length,
    short_excess,
    summarize_launches,
)
from profiler_kit.analyze.roofline import (
    ROOFLINE_COLUMNS,
    calibrated_peaks,
    gpu_peaks,
    op_gpu_time,
    peaks_table,
    summarize_roofline,
)
from profiler_kit.analyze.sequences import kernel_sequences, launch_ranges
from profiler_kit.analyze.tables import Trace, one_value_view
from profiler_kit.render.units import compact_name
from profiler_kit.report import Section, Table

DIAGNOSIS_TABLES = (
    "findings",
    "temporal",
    "temporal_steps",
    "idle",
    "idle_classes",
    "launch_calls",
    "launch_phases",
    "copies",
    "queue",
    "sequences",
    "collectives",
    "bandwidth",
    "bandwidth_instances",
    "stragglers",
    "stragglers_by_step",
    "roofline",
    "roofline_peaks",
)


def diagnose(
    trace: Trace,
    ops: pd.DataFrame,
    categories: pd.DataFrame | None = None,
    matched: pd.DataFrame | None = None,
    busy_ns: int | None = None,
    pool: Executor | None = None,
    sequences: Job | None = None,
) -> dict[str, pd.DataFrame]:
    """The diagnosis tables of one trace (DIAGNOSIS_TABLES); ``ops`` is ``gpu_ops(trace)``, ``matched`` the
    ops' launch match when ``analyze_trace`` made it (its "launches" table; else matched here), ``busy_ns`` the
    ops' busy time when its overview measured it (its gpu_busy_ns: ``analyze.idle.temporal_breakdown``).

    A second thread takes the analyses that need only the ops (sequences first: the longest; then the temporal
    breakdown and collectives), then the queue length, while this one matches the launches and summarizes
    them; what the second thread has not started by then is taken back and run here (``taken_back``), so
    neither waits long for the other. numpy releases the GIL in its sorts and reductions, so with a core free
    the two halves overlap. ``pool``: a one-thread pool to share (``analyze_trace``'s, perhaps still busy with its
    last jobs: the report's, ``profiler_kit.build.analyze_source``); by default one of its own. ``sequences``: the
    kernel sequences' job when queued already (``sequences_job``).
    """
    with contextlib.nullcontext(pool) if pool is not None else ThreadPoolExecutor(max_workers=1) as pool:
        side_sequences = sequences if sequences is not None else sequences_job(pool, trace, ops)
        side_ops = pool.submit(_op_analyses, trace, ops, busy_ns)
        launched = launch_table(ops, trace.runtime, matched)
        streams = ops_streams(ops)  # sorted once for the idle time and the queue length
        queue_streams = streams if same_rows(ops, launched) else None
        side_queue = pool.submit(queue_length, launched, MAX_QUEUE_LENGTH, queue_streams)
        idle = idle_breakdown(ops, launched, streams=streams)
        out = {
            "idle": idle,
            "idle_classes": idle_totals(idle),
            "launch_calls": summarize_launches(launched),
            "launch_phases": launch_phases(launched, phase_ranges(trace.nvtx)),
            "copies": copy_bandwidth(trace.memops),
            **roofline(trace, ops),
        }
        out["temporal_steps"] = temporal_by_step(ops, step_windows(step_ranges(trace.nvtx), launched, ops))
        out["queue"] = taken_back(side_queue, queue_length, launched, MAX_QUEUE_LENGTH, queue_streams)
        out |= taken_back(side_ops, _op_analyses, trace, ops, busy_ns)
        out["sequences"] = side_sequences.result()
    out["findings"] = rank_findings(out | {"categories": categories, "short_excess_ns": short_excess(launched)})
    return {name: out[name] for name in DIAGNOSIS_TABLES} | {"comm_kernels": out["comm_kernels"]}


def same_rows(ops: pd.DataFrame, launched: pd.DataFrame) -> bool:
    """Every op launched, from its own process: the launch table's streams and GPU starts are the ops' own
    (the usual case), so the queue length takes the ops' stream order instead of sorting again."""
    if len(launched) != len(ops) or not len(ops):
        return False
    a, b = ops["pid"].to_numpy(), launched["pid"].to_numpy()
    if one_value_view(a) and one_value_view(b):
        return bool(a[0] == b[0])
    return bool(np.array_equal(a, b))


def sequences_job(pool: Executor, trace: Trace, ops: pd.DataFrame) -> Job:
    """The repeating kernel sequences, with the ops or NVTX ranges that launched them, queued on ``pool``: the
    runtime calls are asked for only at the end (a runtime table still arriving is waited for there)."""
    return Job(pool, _sequences, trace, ops)


def _sequences(trace: Trace, ops: pd.DataFrame) -> pd.DataFrame:
    ranges = launch_ranges(trace.meta.get("cpu_op_ranges"), trace.nvtx)
    return kernel_sequences(ops, runtime=lambda: trace.runtime, ranges=ranges)


def _op_analyses(trace: Trace, ops: pd.DataFrame, busy_ns: int | None = None) -> dict[str, pd.DataFrame]:
    """The analyses that need the GPU ops only (no launch matching), but the kernel sequences."""
    comm = trace_comm_kernels(trace, ops)
    instances = collective_instances(comm)
    bandwidth = collective_bandwidth(comm)
    return {
        "temporal": temporal_breakdown(ops, busy_ns),
        "comm_kernels": comm,
        "collectives": summarize_collectives(instances),
        "bandwidth": summarize_bandwidth(bandwidth),
        "bandwidth_instances": bandwidth,
        "stragglers": stragglers(instances),
        "stragglers_by_step": slowest_rank_by_step(instances),
    }


def roofline(trace: Trace, ops: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The per-op roofline when the trace recorded shapes (Kineto record_shapes=True), else no rows; and the
    peaks it was judged against, with their sources (``roofline_peaks``)."""
    cpu = trace.meta.get("cpu_ops")
    if cpu is None:
        return {"roofline": pd.DataFrame(columns=ROOFLINE_COLUMNS), "roofline_peaks": peaks_table(None)}
    peaks = trace_peaks(trace)
    return {
        "roofline": summarize_roofline(cpu, op_gpu_time(cpu, trace.runtime, ops), peaks),
        "roofline_peaks": peaks_table(peaks),
    }


def trace_peaks(trace: Trace) -> dict | None:
    """This GPU's peaks: measured by ``record --calibrate`` when the trace's run folder (or the record folder
    above it) holds them, else the published figures for the GPU's name (analyze/roofline.py GPU_PEAKS)."""
    names = trace.gpus["name"].astype(str).tolist()
    source = trace.meta.get("source")
    cal, where = find_trace_calibration(source, names[0] if names else None) if source else (None, "")
    published = gpu_peaks(names[0] if names else (cal or {}).get("device", ""))
    return (calibrated_peaks(cal, where, published) if cal else None) or published


def find_trace_calibration(source: str, device: str | None) -> tuple[dict | None, str]:
    """(calibration, where) for a trace at ``source`` from profiler_kit.run's layout: run.json's
    ``calibration`` beside the trace, else calibration.json beside it or in the record folder above it.
    Only a calibration of the trace's GPU (run.json's gpu when the trace names none) counts; unreadable
    files are passed over (the published figures are used)."""
    from pathlib import Path

    from profiler_kit.analyze.errors import InputError
    from profiler_kit.analyze.results import CALIBRATION_FIELDS, RUN_FIELDS, read_json_fields

    fields = {k: RUN_FIELDS[k] for k in ("gpu?", "calibration?")}  # all this needs of a run.json
    from profiler_kit.run import CALIBRATION_FILE

    folder = Path(source).parent
    run_json = folder / "run.json"
    try:
        run = read_json_fields(run_json, fields) if run_json.is_file() else {}
    except InputError:
        run = {}
    device = device or (run.get("gpu") or {}).get("name")
    if not device:
        return None, ""
    if (run.get("calibration") or {}).get("device") == device:
        return run["calibration"], str(run_json)
    for f in (folder / CALIBRATION_FILE, folder.parent / CALIBRATION_FILE):
        try:
            cal = read_json_fields(f, CALIBRATION_FIELDS) if f.is_file() else None
        except InputError:
            cal = None
        if cal and cal.get("device") == device:
            return cal, str(f)
    return None, ""


def trace_comm_kernels(trace: Trace, ops: pd.DataFrame) -> pd.DataFrame:
    """The trace's communication kernels with their rank: Kineto's own rank (distributedInfo.rank) when
    the trace has one, else the processes numbered as ``analyze.ranks.rank_of_pid`` numbers them."""
    from profiler_kit.analyze.ranks import rank_of_pid

    rank, args = trace.meta.get("rank"), trace.meta.get("collective_args")  # args: Kineto's message sizes
    is_kernel = ops["is_kernel"].to_numpy(dtype=bool)
    pid = ops["pid"].to_numpy()
    if isinstance(rank, int) and rank >= 0:
        comm = comm_kernels(ops, rank=rank, args=args)
    elif one_value_view(pid) or len(distinct_values(pid[is_kernel])) < 2:  # one process: no copy of the kernels
        comm = comm_kernels(ops, args=args)
    else:
        comm = comm_kernels(ops, rank_of_pid=rank_of_pid(ops[is_kernel]), args=args)
    steps = step_ranges(trace.nvtx)
    if len(comm) and len(steps):  # the step each collective was launched in, for the slowest rank per step
        in_comm = np.asarray(ops["category"] == "communication", dtype=bool) & is_kernel
        comm["step"] = launch_steps(ops[in_comm], trace.runtime, steps)
    return comm


def cross_rank_sections(results) -> list[Section]:
    """Traces that are ranks of one run (Kineto files each with its distributedInfo.rank): communication per
    rank, collective skew and stragglers across the files. [] unless two ranks or more are present."""
    ranked = [r for r in results if isinstance(r.meta.get("rank"), int) and "comm_kernels" in r.tables]
    if len({r.meta["rank"] for r in ranked}) < 2:
        return []
    per_rank = pd.concat(
        [r.tables["temporal"].assign(rank=r.meta["rank"], trace=r.label) for r in ranked], ignore_index=True
    )
    per_rank["comm_hidden_frac"] = 1 - per_rank["comm_exposed_ns"] / per_rank["comm_ns"].where(per_rank["comm_ns"] > 0)
    comm = pd.concat([r.tables["comm_kernels"] for r in ranked], ignore_index=True)
    instances = collective_instances(comm)
    cols = ["rank", "trace", "span_ns", "compute_ns", "idle_ns", "comm_ns", "comm_exposed_ns", "comm_hidden_frac"]
    sec = Section(
        "Communication across ranks",
        text=[
            f"{len(ranked)} traces carry their rank (Kineto distributedInfo.rank). The k-th collective kernel of one "
            "name on each rank is one collective instance; skew = last arrival - first, wait = time ranks spent "
            "in the kernel before the last rank arrived (analyze/collectives.py)."
        ],
        tables=[Table("Communication per rank", per_rank.sort_values("rank")[cols], key="ranks_communication")],
    )
    if len(instances):
        sec.tables.append(Table("Collectives by name", summarize_collectives(instances), key="ranks_collectives"))
        sec.tables.append(Table("Ranks the others waited for", stragglers(instances), key="ranks_stragglers"))
        sec.tables.append(
            Table(
                TITLES["stragglers_by_step"],
                slowest_rank_by_step(instances),
                NOTES["stragglers_by_step"],
                "ranks_stragglers_by_step",
            )
        )
        bandwidth = collective_bandwidth(comm)
        sec.tables.append(
            Table(TITLES["bandwidth"], summarize_bandwidth(bandwidth), NOTES["bandwidth"], "ranks_bandwidth")
        )
        sec.tables.append(
            Table(TITLES["bandwidth_instances"], bandwidth, NOTES["bandwidth_instances"], "ranks_bandwidth_instances")
        )
    return [sec]


def findings_text(tables: dict[str, pd.DataFrame]) -> list[str]:
    """One line per finding, costliest first (none when the trace was not diagnosed)."""
    f = tables.get("findings")
    if f is None:
        return []
    if f.empty:
        return ["Findings: none of the checks in analyze/findings.py FINDINGS reached its threshold."]
    return [
        f"Finding {int(r['rank'])}: {r['finding']}: {r['cost_ns'] / 1e6:.3f} ms, {100 * r['share_frac']:.1f}% of "
        f"the GPU span ({r['detail']}). Usual fix: {r['fix']}."
        for _, r in f.iterrows()
    ]


NOTES = {
    "findings": "Ranked by measured cost; thresholds (share of the GPU span) in analyze/findings.py FINDINGS.",
    "temporal": "Per process and GPU over its first-to-last op span (HTA temporal breakdown): compute = kernels "
    "other than communication; non-compute = memcpy/memset and communication not under compute.",
    "temporal_steps": "Each step's GPU window: from the first op it launched to the next step's first op.",
    "idle": "Gaps between consecutive ops of a stream (HTA idle time breakdown): host_wait = launched after the "
    "previous op ended; kernel_wait = gap under 30 us; other = queued but waiting (other stream, sync).",
    "idle_classes": "Idle time per class, summed over streams.",
    "launch_calls": "Launch delay = GPU start - end of the launching call (clipped at 0); short = GPU time under "
    "the call's CPU time; outliers: call > 50 us, delay > 100 us (HTA defaults).",
    "launch_phases": "Ops launched while each phase range was open; launch-bound when launch CPU time >= GPU time, "
    "or most ops are short and start within 10 us of their launch.",
    "copies": "Bandwidth while copying (bytes / copy time); ceiling = best single copy of >= 1 MiB in this trace.",
    "queue": "Ops launched and not yet started per stream (HTA queue length); full = time at >= 1024 queued ops, "
    "when the host's next launch blocks.",
    "sequences": "Runs of consecutive kernels on one stream that repeat most, by total GPU time: fusion candidates. "
    "launched by: the innermost op or range open at each kernel's launch (named once when the same for all); op "
    "stack: the outer part of the op stacks at the launches that all kernels of the sequence share, outermost "
    "first; '-': outside every op and range; both the most common over up to 8 occurrences, op stack (%) their "
    "share; empty where the launches are not in the trace.",
    "collectives": "Processes of this trace as ranks: the k-th collective of a name on each rank is one instance; "
    "skew = last arrival - first; wait = time ranks spent in the kernel before the last one arrived.",
    "bandwidth": "NCCL's bus bandwidth (nccl-tests busBw): message bytes / time x the collective's factor "
    "(all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast, reduce, send/recv 1), over "
    "the instances whose size the trace records (Kineto's collective args; nsys exports: not recorded, empty).",
    "bandwidth_instances": "Per collective instance; time = after the last rank arrived when the trace holds two "
    "ranks or more, else the kernel's time, wait for the other ranks included (a lower bound on bandwidth).",
    "stragglers": "How often each rank entered a collective last, and the others' wait then.",
    "stragglers_by_step": "Per step (ProfilerStep#N or NVTX 'step' open when the collective was launched): the rank "
    "the others waited for longest in its collectives (HTA get_potential_stragglers' per-iteration question).",
    "roofline": "Ops with recorded shapes (innermost with a formula); FLOPs as torch.utils.flop_counter, bytes = "
    "inputs + output once; against the peaks in the next table.",
    "roofline_peaks": "Measured by record --calibrate (calibration.json in the run folder) where the run has it, "
    "else the vendor's published dense figure for this GPU (analyze/roofline.py GPU_PEAKS).",
}
TITLES = {
    "findings": "Findings",
    "temporal": "Temporal breakdown per GPU",
    "temporal_steps": "Temporal breakdown per step",
    "idle": "Idle time per stream",
    "idle_classes": "Idle time by cause",
    "launch_calls": "Launch statistics per launching call",
    "launch_phases": "Launch-bound verdict per phase",
    "copies": "Memcpy bandwidth per kind",
    "queue": "Launch queue length per stream",
    "sequences": "Repeating kernel sequences",
    "collectives": "Collective skew by name",
    "bandwidth": "Collective bus bandwidth by name",
    "bandwidth_instances": "Collective bus bandwidth per instance",
    "stragglers": "Ranks the others waited for",
    "stragglers_by_step": "Slowest rank per step",
    "roofline": "Per-op roofline",
    "roofline_peaks": "Roofline peaks and their sources",
}


def _numbered(df: pd.DataFrame, keys: list[str]) -> list[str]:
    """The last of ``keys`` with " 1", " 2", ... where the same keys repeat (rows in time order); unique ones as they are."""
    group = df.groupby(keys, sort=False, observed=True)
    count, nth = group[keys[-1]].transform("size").to_numpy(), group.cumcount().to_numpy() + 1
    return [f"{v} {i}" if c > 1 else str(v) for v, c, i in zip(df[keys[-1]], count, nth, strict=True)]


# tables that measured nothing when this column is all zero (a trace without GPU ops has no idle gaps)
NOTHING_WHEN_ZERO = {"idle_classes": "gaps"}


def findings_section(label: str, tables: dict[str, pd.DataFrame]) -> Section:
    """The tables behind the findings that measured something, each keyed for CSV/JSON output."""
    sec = Section("Why is it slow")
    for name in DIAGNOSIS_TABLES:
        df = tables.get(name)
        if name in NOTHING_WHEN_ZERO and df is not None and not df[NOTHING_WHEN_ZERO[name]].any():
            continue
        if df is not None and len(df):
            if name == "sequences":  # kernel names shortened for reading; the full ones stay in the table data
                df = df.assign(
                    sequence=[" -> ".join(compact_name(k, 40) for k in s.split(" -> ")) for s in df["sequence"]]
                )
            if name == "temporal_steps":  # NVTX "step" ranges share one name: number them, in time order
                df = df.assign(step=_numbered(df, ["pid", "device_id", "step"]))
            sec.tables.append(Table(TITLES[name], df, note=NOTES[name], key=f"{label}_{name}"))
    return sec
