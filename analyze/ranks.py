"""Cross-rank analyses of data-parallel profiles: communication vs compute vs idle, overlap, stragglers.

All functions take normalized kernel tables (analyze.tables.KERNELS) with a
``category`` column (analyze.taxonomy.classify_kernels; NCCL kernels are
"communication"). Ranks come from a ``rank`` column when present (see
``concat_ranks`` for one trace per rank), else from ``pid`` (one multi-process
nsys export): processes are numbered in order of the GPU they use, then pid.

Times are GPU kernel intervals. Busy/communication/compute times are lengths of
interval unions, so concurrent kernels on several streams count once. A NCCL
kernel runs from launch until its peers join, so communication time includes
waiting for a late rank: a straggler shows up as communication on the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from profiler_kit.analyze.intervals import intersection_length, union_length

COMMUNICATION = "communication"


def concat_ranks(kernel_tables: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """One kernel table per rank (e.g. one Kineto trace per rank, in rank order) -> one table with ``rank``."""
    frames = [k.assign(rank=r) for r, k in enumerate(kernel_tables)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["rank"])


def rank_of_pid(kernels: pd.DataFrame) -> dict[int, int]:
    """Rank number per launching process: ordered by the lowest GPU the process used, then pid."""
    first_gpu = kernels.groupby("pid", observed=True)["device_id"].min()
    ordered = sorted(first_gpu.items(), key=lambda kv: (kv[1], kv[0]))
    return {int(pid): r for r, (pid, _) in enumerate(ordered)}


def with_ranks(kernels: pd.DataFrame) -> pd.DataFrame:
    """``kernels`` with a ``rank`` column (kept if present, else derived from ``pid``)."""
    if "rank" in kernels.columns:
        return kernels
    return kernels.assign(rank=kernels["pid"].map(rank_of_pid(kernels)).astype("int64"))


def _split(k: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    comm = k["category"].astype(str) == COMMUNICATION
    return k[comm], k[~comm]


def _overlap_times(
    k: pd.DataFrame, comm: pd.DataFrame, comp: pd.DataFrame, span: tuple[int, int] | None = None
) -> dict:
    """Busy, idle, communication, computation and overlap times (ns) of ``comm`` and ``comp`` over ``span`` (default: the span of ``k``)."""
    cs, ce = comm["start_ns"].to_numpy(), comm["end_ns"].to_numpy()
    ps, pe = comp["start_ns"].to_numpy(), comp["end_ns"].to_numpy()
    lo, hi = span if span is not None else (int(k["start_ns"].min()), int(k["end_ns"].max()))
    comm_ns, comp_ns = union_length(cs, ce), union_length(ps, pe)
    overlap = intersection_length(cs, ce, ps, pe)
    busy = comm_ns + comp_ns - overlap
    span_ns = hi - lo
    return {
        "span_ns": span_ns,
        "busy_ns": busy,
        "idle_ns": span_ns - busy,
        "comm_ns": comm_ns,
        "compute_ns": comp_ns,
        "overlap_ns": overlap,
        "exposed_comm_ns": comm_ns - overlap,
    }


TIME_COLUMNS = ("span_ns", "busy_ns", "idle_ns", "comm_ns", "compute_ns", "overlap_ns", "exposed_comm_ns")


def _fractions(df: pd.DataFrame, keys: tuple[str, ...]) -> pd.DataFrame:
    if df.empty:  # no kernels (a CPU-only run): the columns, no rows
        df = pd.DataFrame(columns=[*keys, *TIME_COLUMNS], dtype="int64")
    span = df["span_ns"].where(df["span_ns"] > 0)
    comm = df["comm_ns"].where(df["comm_ns"] > 0)
    return df.assign(
        comm_hidden_frac=df["overlap_ns"] / comm,
        comm_frac=df["comm_ns"] / span,
        compute_frac=df["compute_ns"] / span,
        idle_frac=df["idle_ns"] / span,
    )


def summarize_rank_time(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per rank: GPU time in communication kernels, compute kernels, idle, and how much communication is hidden.

    Args:
        kernels: start_ns, end_ns, duration_ns, category, device_id, and ``rank`` or ``pid``.

    Returns:
        One row per rank: rank, pid, device_id, kernels, comm_kernels,
        comm_kernel_sum_ns / compute_kernel_sum_ns (sums of kernel durations: what
        ``nsys stats`` gpukernsum totals per process), span_ns (first kernel start
        to last kernel end), busy_ns, idle_ns, comm_ns / compute_ns (interval-union
        time), overlap_ns (communication running while a compute kernel runs on the
        same rank), exposed_comm_ns (comm_ns - overlap_ns), comm_hidden_frac
        (overlap / comm), comm_frac, compute_frac, idle_frac (of span).
        Ranks without kernels are absent.
    """
    k = with_ranks(kernels)
    rows = []
    for rank, g in k.groupby("rank", sort=True):
        comm, comp = _split(g)
        rows.append(
            {
                "rank": int(rank),
                "pid": int(g["pid"].iloc[0]),
                "device_id": int(g["device_id"].min()),
                "kernels": len(g),
                "comm_kernels": len(comm),
                "comm_kernel_sum_ns": int(comm["duration_ns"].sum()),
                "compute_kernel_sum_ns": int(comp["duration_ns"].sum()),
                **_overlap_times(g, comm, comp),
            }
        )
    keys = ("rank", "pid", "device_id", "kernels", "comm_kernels", "comm_kernel_sum_ns", "compute_kernel_sum_ns")
    return _fractions(pd.DataFrame(rows), keys)


def step_ranges(nvtx: pd.DataFrame, kernels: pd.DataFrame | None = None, name: str = "step") -> pd.DataFrame:
    """The ``name`` ranges of each rank, numbered in time order: rank, step, start_ns, end_ns, duration_ns.

    Args:
        nvtx: NVTX_RANGES rows (or record_function ranges), with ``rank`` or ``pid``.
        kernels: when ``nvtx`` has no ``rank``, the kernels whose pid -> rank mapping to use.
    """
    r = nvtx[nvtx["name"].astype(str) == name]
    if "rank" not in r.columns:
        mapping = (
            rank_of_pid(kernels) if kernels is not None else {p: i for i, p in enumerate(sorted(r["pid"].unique()))}
        )
        r = r.assign(rank=r["pid"].map(mapping))
        r = r[r["rank"].notna()].astype({"rank": "int64"})
    r = r.sort_values(["rank", "start_ns"])
    r = r.assign(step=r.groupby("rank").cumcount().astype("int64"))
    return r[["rank", "step", "start_ns", "end_ns", "duration_ns"]].reset_index(drop=True)


def summarize_steps(kernels: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank and step: the summarize_rank_time figures over kernels that start inside the step's range.

    Args:
        kernels: as for summarize_rank_time.
        steps: rank, step, start_ns, end_ns (CPU ranges, e.g. from ``step_ranges``). A kernel belongs
            to the step whose range contains its start; the step's span is its range, so GPU idle
            includes time the GPU waited for the CPU. Exact when the step ends with a device sync
            (workloads.ddp_train does), approximate otherwise (GPU work can spill into the next step).

    Returns:
        rank, step, step_ns (range duration), span_ns, busy_ns, idle_ns, comm_ns, compute_ns,
        overlap_ns, exposed_comm_ns and the fractions.
    """
    k = with_ranks(kernels)
    rows = []
    for rank, s in steps.groupby("rank", sort=True):
        g = k[k["rank"] == rank].sort_values("start_ns")
        starts = g["start_ns"].to_numpy()
        for st in s.itertuples(index=False):
            lo, hi = np.searchsorted(starts, [st.start_ns, st.end_ns], side="left")
            w = g.iloc[lo:hi]
            comm, comp = _split(w)
            rows.append(
                {"rank": int(rank), "step": int(st.step), "step_ns": int(st.end_ns - st.start_ns)}
                | _overlap_times(w, comm, comp, span=(int(st.start_ns), int(st.end_ns)))
            )
    return _fractions(pd.DataFrame(rows), ("rank", "step", "step_ns"))


def slowest_rank_per_step(steps: pd.DataFrame) -> pd.DataFrame:
    """Which rank is slowest in each step, and by how much.

    Args:
        steps: rank, step, duration_ns (``step_ranges`` output, or any per-rank step times).

    Returns:
        One row per step: step, slowest_rank, slowest_ns, fastest_rank, fastest_ns,
        spread_ns (slowest - fastest), spread_frac (spread / slowest). Ties go to the lower rank.
    """
    s = steps.sort_values(["step", "rank"])
    g = s.groupby("step", sort=True)["duration_ns"]
    slow = s.loc[g.idxmax(), ["step", "rank", "duration_ns"]].set_index("step")
    fast = s.loc[g.idxmin(), ["step", "rank", "duration_ns"]].set_index("step")
    out = pd.DataFrame(
        {
            "slowest_rank": slow["rank"].astype("int64"),
            "slowest_ns": slow["duration_ns"].astype("int64"),
            "fastest_rank": fast["rank"].astype("int64"),
            "fastest_ns": fast["duration_ns"].astype("int64"),
        }
    )
    out["spread_ns"] = out["slowest_ns"] - out["fastest_ns"]
    out["spread_frac"] = out["spread_ns"] / out["slowest_ns"].where(out["slowest_ns"] > 0)
    return out.reset_index()


def compare_variants(per_step: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per DDP variant from its ``summarize_steps`` table.

    Args:
        per_step: variant label -> summarize_steps output (rank, step, step_ns, comm_ns, ...).

    Returns:
        variant, ranks, steps, step_ns (median over steps of the slowest rank's step), comm_ns,
        exposed_comm_ns, overlap_ns, compute_ns, idle_ns (each the mean per rank-step),
        comm_hidden_frac (total overlap / total comm), exposed_comm_frac (exposed comm / step_ns).
    """
    rows = []
    for variant, d in per_step.items():
        slowest = d.groupby("step")["step_ns"].max()
        comm = d["comm_ns"].sum()
        rows.append(
            {
                "variant": variant,
                "ranks": int(d["rank"].nunique()),
                "steps": int(d["step"].nunique()),
                "step_ns": int(slowest.median()),
                "comm_ns": int(d["comm_ns"].mean()),
                "exposed_comm_ns": int(d["exposed_comm_ns"].mean()),
                "overlap_ns": int(d["overlap_ns"].mean()),
                "compute_ns": int(d["compute_ns"].mean()),
                "idle_ns": int(d["idle_ns"].mean()),
                "comm_hidden_frac": d["overlap_ns"].sum() / comm if comm > 0 else np.nan,
                "exposed_comm_frac": d["exposed_comm_ns"].mean() / slowest.median() if slowest.median() > 0 else np.nan,
            }
        )
    return pd.DataFrame(rows)


def summarize_all_reduce(rows: pd.DataFrame) -> pd.DataFrame:
    """All-reduce benchmark rows (workloads.distributed JSONL) as a table sorted by backend, world size, size.

    Returns:
        backend, world_size, size_bytes, time_ns (median per op, slowest rank), algbw_gb_per_s
        (size / time, 1e9 bytes), busbw_gb_per_s (algbw * 2(n-1)/n), iters, device, gpus_on_host
        (GPUs the host had, when recorded: a 2-rank run on a 4-GPU host may use other links than on a 2-GPU one).
    """
    r = rows.sort_values(["backend", "world_size", "size_bytes"], kind="stable").reset_index(drop=True)
    hosts = r["gpus_on_host"] if "gpus_on_host" in r else pd.Series(np.nan, index=r.index)
    return pd.DataFrame(
        {
            "backend": r["backend"],
            "world_size": r["world_size"].astype("int64"),
            "size_bytes": r["size_bytes"].astype("int64"),
            "time_ns": (r["time_s_median"] * 1e9).round().astype("int64"),
            "algbw_gb_per_s": r["algbw_bytes_per_s"] / 1e9,
            "busbw_gb_per_s": r["busbw_bytes_per_s"] / 1e9,
            "iters": r["iters"].astype("int64"),
            "device": r["device"],
            "gpus_on_host": hosts.astype("Int64"),
        }
    )


def launch_keys(rows: pd.DataFrame) -> pd.Series:
    """Which launch each DDP row came from: its ``launch`` id, else (older rows) its world size."""
    ws = "ws" + rows["world_size"].astype("int64").astype(str)
    if "launch" not in rows:
        return ws
    return rows["launch"].where(rows["launch"].notna(), ws).astype(str)


def summarize_ddp_steps(rows: pd.DataFrame) -> pd.DataFrame:
    """DDP step times per variant (workloads.ddp_train JSONL), next to torch DDP from the same launch.

    Args:
        rows: label, variant, bucket_mb, world_size, step_s (list of per-step seconds, slowest rank),
            optionally launch (rows of one torchrun launch share it).

    Returns:
        launch, label, variant, bucket_mb, world_size, steps, step_ns (median), step_min_ns,
        torch_ddp_bucket_mb and torch_ddp_ns (median of every torch-DDP step of the same launch with the
        same bucket size, else with 25 MiB),
        vs_torch_ddp_frac (step_ns / torch_ddp_ns - 1; negative = faster than torch DDP).
        A label that appears twice in a launch (torch DDP run first and last) gets one row per run.
    """
    rows = rows.assign(
        launch=launch_keys(rows),
        gpus_on_host=rows["gpus_on_host"] if "gpus_on_host" in rows else pd.Series(np.nan, index=rows.index),
    )
    pooled = {
        key: np.concatenate(g["step_s"].map(np.asarray).to_list())
        for key, g in rows[rows["variant"] == "torch"].groupby(["launch", "bucket_mb"])
    }
    out = []
    for r in rows.itertuples(index=False):
        steps = np.asarray(r.step_s, dtype=float)
        bucket = r.bucket_mb if r.variant in ("bucketed", "torch") else None
        ref_mb = bucket if (r.launch, bucket) in pooled else 25.0
        ref = pooled.get((r.launch, ref_mb))
        ref_ns = int(round(np.median(ref) * 1e9)) if ref is not None else None
        step_ns = int(round(np.median(steps) * 1e9))
        out.append(
            {
                "launch": r.launch,
                "label": r.label,
                "variant": r.variant,
                "bucket_mb": bucket,
                "world_size": int(r.world_size),
                "gpus_on_host": r.gpus_on_host,
                "steps": len(steps),
                "step_ns": step_ns,
                "step_min_ns": int(round(steps.min() * 1e9)),
                "torch_ddp_bucket_mb": ref_mb if ref is not None else None,
                "torch_ddp_ns": ref_ns,
                "vs_torch_ddp_frac": step_ns / ref_ns - 1 if ref_ns else np.nan,
            }
        )
    df = pd.DataFrame(out)
    df["gpus_on_host"] = df["gpus_on_host"].astype("Int64")
    return df


def ddp_scaling(steps: pd.DataFrame) -> pd.DataFrame:
    """Median step time per variant label and world size on one host (rows of summarize_ddp_steps).

    Batch per rank is fixed, so with perfect scaling the step time stays flat as ranks are added:
    ``efficiency_n<n>_frac`` = step time at the smallest world size / step time at n (1.0 = perfect).
    Only runs on hosts with the same GPU count are compared (rows without one are left out), and
    only labels measured at every world size of that host. Several runs of one label are pooled by median.
    """
    known = steps.dropna(subset=["gpus_on_host"])
    frames = []
    for host, g in known.groupby("gpus_on_host"):
        t = g.groupby(["label", "world_size"], sort=False)["step_ns"].median().unstack("world_size")
        t = t.dropna().sort_index(axis=1)
        if t.shape[1] < 2 or t.empty:
            continue
        out = pd.DataFrame({"gpus_on_host": int(host), "label": t.index})
        for n in t.columns:
            out[f"step_n{n}_ns"] = t[n].to_numpy()
        for n in t.columns[1:]:
            out[f"efficiency_n{n}_frac"] = (t[t.columns[0]] / t[n]).to_numpy()
        frames.append(out)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
