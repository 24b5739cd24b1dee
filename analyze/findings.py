"""Ranked findings: why the GPU time is what it is, each with a measured cost and the usual fix.

A finding fires when its measured cost reaches its threshold share of the GPU span (FINDINGS, one table
of data like the taxonomy). Every cost is a time in ns read from an analysis table (named in ``table``);
findings are ranked by that cost. The span is the sum, over GPUs, of each one's first-op-to-last-op time
(``analyze.idle.temporal_breakdown``), so shares of several GPUs add up to at most 1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

FINDINGS = (  # first field: key of MEASURES; threshold: minimum cost / span
    # key              threshold  table              title / usual fix
    (
        "launch_bound",
        0.05,
        "idle",
        "GPU idle waiting for the host to launch work (launch-bound)",
        "CUDA graphs or torch.compile(mode='reduce-overhead'); fewer, larger kernels (fusion, bigger batches); "
        "move host work (data loading, .item(), logging) out of the step",
    ),
    (
        "gpu_idle_other",
        0.10,
        "idle",
        "GPU idle with work queued (waiting on another stream, a sync or a copy)",
        "remove synchronizations in the step (.item(), .cpu(), torch.cuda.synchronize), check event waits "
        "between streams",
    ),
    (
        "exposed_comm",
        0.05,
        "temporal",
        "Communication not hidden under compute",
        "overlap communication with backward (DDP buckets, bucket_cap_mb; FSDP prefetch), fewer larger "
        "collectives, faster interconnect settings",
    ),
    (
        "host_to_device",
        0.02,
        "copies",
        "Host-to-device copies on the GPU timeline",
        "pinned memory (DataLoader pin_memory=True) with non_blocking=True, prefetch the next batch on a side "
        "stream, keep tensors on the GPU",
    ),
    (
        "memory_bound_ops",
        0.25,
        "categories",
        "Elementwise, softmax, normalization and reduction kernels take a large share of GPU time",
        "fusion: torch.compile, fused kernels (FlashAttention for softmax(QK^T)V, fused LayerNorm, fused "
        "optimizers: foreach/fused=True)",
    ),
    (
        "short_kernels",
        0.05,
        "launch_calls",
        "Ops that run shorter on the GPU than their launch takes on the CPU",
        "CUDA graphs, torch.compile, horizontal fusion of small ops (foreach optimizers)",
    ),
    (
        "collective_wait",
        0.05,
        "collectives",
        "Ranks waiting inside collectives for the last rank to arrive",
        "find why the last rank is late (stragglers table: uneven work, host stalls, data loading on that rank); "
        "balance the work; the wait is not communication and a faster network will not remove it",
    ),
    (
        "below_roofline",
        0.05,
        "roofline",
        "Matmuls and attention far below their roofline",
        "shapes multiples of 8 (fp16/bf16) or 64; bf16 or TF32 instead of plain fp32 "
        "(torch.backends.cuda.matmul.allow_tf32 = True); fewer, larger matmuls (batch them); FlashAttention",
    ),
    (
        "straggler",
        0.05,
        "temporal",
        "One GPU/rank busier than the others (the others wait for it at each collective)",
        "balance work across ranks (sequence lengths, uneven shards), check the slow rank's GPU clocks and host",
    ),
)
MEMORY_BOUND_CATEGORIES = ("elementwise", "softmax", "normalization", "reduction")
HOST_TO_DEVICE = "[CUDA memcpy Host-to-Device]"
FINDING_COLUMNS = ["rank", "finding", "cost_ns", "share_frac", "threshold_frac", "detail", "table", "fix"]


def _launch_bound(t: dict) -> tuple[float, str]:
    """Device idle time times the host-wait share of the streams' idle time, over GPUs."""
    tb, idle = t["temporal"], t["idle"]
    if tb.empty or idle.empty:
        return 0.0, ""
    cost, parts = 0.0, []
    for _, row in tb.iterrows():
        mine = idle[(idle["pid"] == row["pid"]) & (idle["device_id"] == row["device_id"])]
        total = mine["idle_ns"].sum()
        host = mine.loc[mine["idle_class"] == "host_wait", "idle_ns"].sum()
        if total > 0:
            cost += row["idle_ns"] * host / total
            parts.append(host / total)
    share = f"{100 * max(parts):.0f}%" if parts else "n/a"
    return cost, f"host wait is up to {share} of the streams' idle time; GPU idle {_ms(tb['idle_ns'].sum())} ms"


def _gpu_idle_other(t: dict) -> tuple[float, str]:
    tb, idle = t["temporal"], t["idle"]
    if tb.empty or idle.empty:
        return 0.0, ""
    cost = 0.0
    for _, row in tb.iterrows():
        mine = idle[(idle["pid"] == row["pid"]) & (idle["device_id"] == row["device_id"])]
        total = mine["idle_ns"].sum()
        if total > 0:
            cost += row["idle_ns"] * mine.loc[mine["idle_class"] != "host_wait", "idle_ns"].sum() / total
    return cost, "idle gaps whose op had been launched before the previous op on its stream ended"


def _exposed_comm(t: dict) -> tuple[float, str]:
    tb = t["temporal"]
    comm = tb["comm_ns"].sum() if len(tb) else 0
    exposed = tb["comm_exposed_ns"].sum() if len(tb) else 0
    hidden = 1 - exposed / comm if comm else np.nan
    return float(exposed), f"communication {_ms(comm)} ms, {100 * hidden:.0f}% of it overlapped with compute"


def _host_to_device(t: dict) -> tuple[float, str]:
    c = t["copies"]
    row = c[c["kind"] == HOST_TO_DEVICE]
    if row.empty:
        return 0.0, ""
    r = row.iloc[0]
    return float(r["total_ns"]), f"{int(r['copies'])} copies, {r['bytes'] / 1e6:.1f} MB at {r['gb_per_s']:.1f} GB/s"


def _memory_bound_ops(t: dict) -> tuple[float, str]:
    cats = t["categories"]
    if cats is None or cats.empty:
        return 0.0, ""
    sel = cats[cats["category"].isin(MEMORY_BOUND_CATEGORIES)]
    total = cats["total_ns"].sum()
    ns = float(sel["total_ns"].sum())
    return ns, f"{100 * ns / total:.0f}% of GPU op time ({', '.join(MEMORY_BOUND_CATEGORIES)})" if total else ""


def _short_kernels(t: dict) -> tuple[float, str]:
    """The launch time the short ops cost beyond their own GPU time, when the GPU had no queue to hide it."""
    phases = t["launch_phases"]
    calls = t["launch_calls"]
    if calls.empty:
        return 0.0, ""
    bound = phases[phases["verdict"] == "launch-bound"] if len(phases) else phases
    short = int(calls["short_ops"].sum())
    ops = int(calls["ops"].sum())
    if len(phases) and bound.empty:
        return 0.0, ""  # short ops, but every phase keeps a queue: they cost nothing
    excess = float(t["short_excess_ns"])
    names = ", ".join(bound["phase"].astype(str).head(3)) if len(bound) else "no phase ranges"
    return excess, f"{short} of {ops} ops shorter than their launch; launch-bound phases: {names}"


def _straggler(t: dict) -> tuple[float, str]:
    tb = t["temporal"]
    if len(tb) < 2:
        return 0.0, ""
    busy = tb["compute_ns"]
    i = int(busy.to_numpy().argmax())
    slow = tb.iloc[i]
    return float(busy.max() - busy.median()), (
        f"pid {int(slow['pid'])} GPU {int(slow['device_id'])} computes {_ms(busy.max())} ms, "
        f"median GPU {_ms(busy.median())} ms"
    )


def _collective_wait(t: dict) -> tuple[float, str]:
    c = t.get("collectives")
    if c is None or c.empty:
        return 0.0, ""
    s = t["stragglers"]
    top = s.iloc[0] if len(s) else None
    who = (
        f"; rank {int(top['rank'])} arrived last at {100 * top['arrived_last_frac']:.0f}% of them"
        if top is not None
        else ""
    )
    return float(c["wait_total_ns"].sum()), f"{int(c['instances'].sum())} collectives{who}"


BELOW_ROOF_FRAC = 0.5  # an op under half of what the roofline allows at its intensity counts


def _below_roofline(t: dict) -> tuple[float, str]:
    """GPU time the slow matmul/attention ops would save at their roof: time x (1 - achieved / roof)."""
    r = t.get("roofline")
    if r is None or r.empty:
        return 0.0, ""
    slow = r[r["kind"].isin(["matmul", "attention"]) & (r["of_roof_frac"] < BELOW_ROOF_FRAC)]
    if slow.empty:
        return 0.0, ""
    lost = float((slow["gpu_ns"] * (1 - slow["of_roof_frac"])).sum())
    worst = slow.iloc[0]
    return lost, (
        f"{len(slow)} op shapes under {100 * BELOW_ROOF_FRAC:.0f}% of their roof; costliest {worst['op']} "
        f"{worst['input_dims']} at {100 * worst['of_roof_frac']:.0f}%"
    )


MEASURES = {
    "launch_bound": _launch_bound,
    "gpu_idle_other": _gpu_idle_other,
    "exposed_comm": _exposed_comm,
    "host_to_device": _host_to_device,
    "memory_bound_ops": _memory_bound_ops,
    "short_kernels": _short_kernels,
    "collective_wait": _collective_wait,
    "below_roofline": _below_roofline,
    "straggler": _straggler,
}


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def rank_findings(tables: dict) -> pd.DataFrame:
    """The findings whose cost reaches their threshold, costliest first (FINDING_COLUMNS).

    ``tables``: temporal, idle (per stream), copies, categories, launch_calls, launch_phases and
    short_excess_ns (the launch CPU time of short ops beyond their GPU time, ns).
    """
    span = float(tables["temporal"]["span_ns"].sum()) if len(tables["temporal"]) else 0.0
    rows = []
    for key, threshold, table, title, fix in FINDINGS:
        cost, detail = MEASURES[key](tables)
        share = cost / span if span else np.nan
        if span and cost > 0 and share >= threshold:
            rows.append([title, int(round(cost)), share, threshold, detail, table, fix])
    out = pd.DataFrame(rows, columns=FINDING_COLUMNS[1:]).sort_values("cost_ns", ascending=False, kind="stable")
    out.insert(0, "rank", np.arange(1, len(out) + 1))
    return out.reset_index(drop=True)
