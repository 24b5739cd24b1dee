"""Collectives across ranks: arrival skew, time after the last arrival, and the rank the others wait for.

A collective kernel (taxonomy category ``communication``) cannot finish before every rank has entered it,
so a rank that arrives early spins inside the kernel: its kernel time is partly waiting, not moving data.
The k-th kernel of one name on each rank is taken as the same collective instance (NCCL runs collectives
in the same order on every rank of a communicator). Per instance:

- arrival skew = last start - first start (TraceLens' "synchronization skew", HTA's straggler signal);
- after_last_ns = last end - last start: the collective itself, once everyone is in;
- wait_ns = sum over ranks of (last start - the rank's start): time spent waiting for the last rank;
- bus bandwidth (NCCL's busBw, as nccl-tests reports it): algBw = message bytes / time, times BUS_FACTOR of
  the collective for a group of n ranks. The time is after_last_ns when two ranks or more are in the trace
  (the transfer once everyone is in), else the one rank's kernel time, which includes any wait for the
  others (a lower bound). Bytes are the full buffer as nccl-tests counts it: the larger of the input and
  the output message (all-gather's output, reduce-scatter's input), from the collective args Kineto copies
  onto NCCL kernels ("In msg nelems", "Out msg nelems", "dtype", "Group size"); nsys exports and older
  Kineto traces do not record sizes: bytes and bandwidth are then "not recorded" (NaN).

Times of different processes are compared as recorded: ranks on one host share its clock; across hosts
the skew includes any clock offset between them.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

COMM_COLUMNS = ["rank", "name", "start_ns", "end_ns", "collective", "bytes", "group_size", "step"]
INSTANCE_COLUMNS = [
    "name",
    "instance",
    "step",
    "ranks",
    "first_start_ns",
    "skew_ns",
    "after_last_ns",
    "wait_ns",
    "last_rank",
]
BANDWIDTH_COLUMNS = [
    "name",
    "instance",
    "collective",
    "ranks",
    "group_size",
    "bytes",
    "bytes_source",
    "time_ns",
    "time_basis",
    "algbw_gb_per_s",
    "busbw_gb_per_s",
]

# Collective -> busBw factor for a group of n ranks (nccl-tests doc/PERFORMANCE.md): the share of the buffer
# each rank's busiest link carries, so that busBw compares with the link's bandwidth whatever n is.
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}
# Kineto "Collective name" (c10d's names, underscores dropped, lower case) or NCCL kernel name part -> BUS_FACTOR key.
# Order matters: the first pattern found in the name wins (allreduce before reduce, reducescatter before reduce).
COLLECTIVE_PATTERNS = (
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("reducescatter", "reduce_scatter"),
    ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"),
    ("sendrecv", "send_recv"),
    ("reduce", "reduce"),
    ("send", "send"),
    ("recv", "recv"),
)
# c10 ScalarType names as Kineto's "dtype" arg spells them -> bytes per element.
DTYPE_BYTES = {
    "Double": 8, "Float": 4, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1, "Byte": 1,
    "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "ComplexHalf": 4, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1, "UInt16": 2, "UInt32": 4, "UInt64": 8,
}  # fmt: skip
NCCL_KERNEL = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")


def collective_kind(text: str) -> str:
    """BUS_FACTOR key of a Kineto collective name ("allreduce", "_reduce_scatter_base") or NCCL kernel name
    ("ncclDevKernel_AllGather_RING_LL"); "" when neither says."""
    m = NCCL_KERNEL.search(text)
    key = (m.group(1) if m else text).replace("_", "").lower()
    for pattern, kind in COLLECTIVE_PATTERNS:
        if pattern in key:
            return kind
    return ""


def message_bytes(in_nelems, out_nelems, dtype) -> np.ndarray:
    """Bytes of the full buffer (the larger of input and output message), NaN where the size or the dtype is
    not recorded (nelems < 0, unknown dtype)."""
    size = pd.Series(np.asarray(dtype, dtype=object)).map(DTYPE_BYTES).to_numpy(dtype=float)
    nelems = np.maximum(np.asarray(in_nelems, dtype=float), np.asarray(out_nelems, dtype=float))
    return np.where(nelems >= 0, nelems * size, np.nan)


def comm_kernels(
    ops: pd.DataFrame,
    rank_of_pid: dict[int, int] | None = None,
    rank: int | None = None,
    args: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The communication kernels of ``gpu_ops`` with their rank (COMM_COLUMNS): ``rank`` for a one-rank trace
    (Kineto's ``distributedInfo.rank``), else ``rank_of_pid`` (processes of a multi-process export), else the pid.

    ``args`` (the Kineto reader's ``meta["collective_args"]``: correlation_id, collective, in_nelems, out_nelems,
    dtype, group_size) gives each kernel its message bytes and group size; without it bytes are NaN, group_size
    -1 and the collective comes from the kernel name.
    """
    comm = ops[np.asarray(ops["category"] == "communication", dtype=bool) & ops["is_kernel"].to_numpy(dtype=bool)]
    pid = np.broadcast_to(comm["pid"].to_numpy(), len(comm))
    if rank is not None:
        ranks = np.full(len(comm), rank, dtype=np.int64)
    elif rank_of_pid:
        ranks = pd.Series(pid).map(rank_of_pid).fillna(-1).astype(np.int64).to_numpy()
    else:
        ranks = np.asarray(pid, dtype=np.int64)
    names = comm["name"].astype(str).to_numpy()
    kind = np.array([collective_kind(n) for n in names], dtype=object)
    nbytes = np.full(len(comm), np.nan)
    group = np.full(len(comm), -1, dtype=np.int64)
    if args is not None and len(args) and len(comm):
        a = args.drop_duplicates("correlation_id").set_index("correlation_id")
        corr = pd.Index(np.broadcast_to(comm["correlation_id"].to_numpy(), len(comm)))
        at = a.index.get_indexer(corr)
        hit = at >= 0
        a = a.iloc[at[hit]]
        nbytes[hit] = message_bytes(a["in_nelems"].to_numpy(), a["out_nelems"].to_numpy(), a["dtype"].to_numpy())
        group[hit] = a["group_size"].to_numpy()
        named = np.array([collective_kind(c) for c in a["collective"].astype(str)], dtype=object)
        kind[np.flatnonzero(hit)[named != ""]] = named[named != ""]
    return pd.DataFrame(
        {
            "rank": ranks,
            "name": names,
            "start_ns": comm["start_ns"].to_numpy(),
            "end_ns": comm["end_ns"].to_numpy(),
            "collective": kind,
            "bytes": nbytes,
            "group_size": group,
            "step": "",
        }
    )


def launch_steps(ops: pd.DataFrame, runtime: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """The step (label) during which each row of ``ops`` was launched, "" when none: its runtime call (pid and
    correlation id, first runtime row wins) inside one of ``steps`` (``analyze.idle.step_ranges``) of its pid.
    A step name used once per process is its label (ProfilerStep#4); a repeated one is numbered ("step #2")."""
    out = np.full(len(ops), "", dtype=object)
    if ops.empty or runtime.empty or steps.empty:
        return out
    corr = np.broadcast_to(ops["correlation_id"].to_numpy(), len(ops))
    pid = np.broadcast_to(ops["pid"].to_numpy(), len(ops))
    from profiler_kit.analyze.sequences import rows_with

    rt = runtime[rows_with(runtime["correlation_id"].to_numpy(), corr)].drop_duplicates(["pid", "correlation_id"])
    at = pd.MultiIndex.from_frame(rt[["pid", "correlation_id"]]).get_indexer(pd.MultiIndex.from_arrays([pid, corr]))
    t = np.where(at >= 0, rt["start_ns"].to_numpy()[np.maximum(at, 0)] if len(rt) else 0, -1)
    for p, g in steps.groupby("pid", sort=False):
        g = g.sort_values("start_ns", kind="stable")
        names = g["name"].astype(str)
        seen = names.groupby(names).cumcount() + 1
        label = np.where(names.map(names.value_counts()) > 1, names + " #" + seen.astype(str), names)
        mine = np.flatnonzero((pid == p) & (at >= 0))
        i = np.searchsorted(g["start_ns"].to_numpy(), t[mine], "right") - 1
        inside = (i >= 0) & (t[mine] < g["end_ns"].to_numpy()[np.maximum(i, 0)])
        out[mine[inside]] = label[i[inside]]
    return out


def collective_instances(comm: pd.DataFrame) -> pd.DataFrame:
    """One row per collective instance seen on two ranks or more (INSTANCE_COLUMNS), in time order."""
    if comm.empty or comm["rank"].nunique() < 2:
        return pd.DataFrame(columns=INSTANCE_COLUMNS)
    out = _instances(comm)
    out = out[out["ranks"] >= 2]
    return out.sort_values("first_start_ns", kind="stable").reset_index(drop=True)[INSTANCE_COLUMNS]


def collective_bandwidth(comm: pd.DataFrame) -> pd.DataFrame:
    """Per collective instance (every one, also those seen on one rank): message bytes, the time they took and
    the effective algorithm and bus bandwidth in GB/s (1e9 B/s) (BANDWIDTH_COLUMNS), in time order.

    time_basis says which time: "after last arrival" (two ranks or more in the trace) or "kernel, wait
    included" (one rank). group_size is the recorded "Group size", else the ranks seen; bandwidth is NaN
    where bytes or the collective are not recorded.
    """
    if comm.empty:
        return pd.DataFrame(columns=BANDWIDTH_COLUMNS)
    out = _instances(comm).sort_values("first_start_ns", kind="stable").reset_index(drop=True)
    many = out["ranks"].to_numpy() >= 2
    time = np.where(many, out["after_last_ns"], out["duration_ns"]).astype(np.int64)
    n = np.where(out["group_size"] > 0, out["group_size"], out["ranks"]).astype(np.int64)
    factor = np.array(
        [BUS_FACTOR[k](g) if k in BUS_FACTOR and g > 0 else np.nan for k, g in zip(out["collective"], n, strict=True)]
    )
    alg = out["bytes"].to_numpy(dtype=float) / np.where(time > 0, time, np.nan)  # B/ns = GB/s
    out = out.assign(
        group_size=n,
        time_ns=time,
        time_basis=np.where(many, "after last arrival", "kernel, wait included"),
        bytes_source=np.where(out["bytes"].notna(), "collective args", "not recorded"),
        algbw_gb_per_s=alg,
        busbw_gb_per_s=alg * factor,
    )
    return out[BANDWIDTH_COLUMNS]


def _instances(comm: pd.DataFrame) -> pd.DataFrame:
    """Every instance (k-th kernel of a name on each rank), with the instance columns, bytes, collective,
    recorded group size and the duration of its (first) kernel."""
    defaults = (("collective", ""), ("bytes", np.nan), ("group_size", -1), ("step", ""))
    comm = comm.assign(**{c: v for c, v in defaults if c not in comm})
    df = comm.sort_values(["rank", "name", "start_ns"], kind="stable").reset_index(drop=True)
    df = df.assign(instance=df.groupby(["rank", "name"], sort=False).cumcount())
    g = df.groupby(["name", "instance"], sort=False)
    last_start = g["start_ns"].transform("max")
    df = df.assign(wait=last_start - df["start_ns"])
    g = df.groupby(["name", "instance"], sort=False)
    out = pd.DataFrame(
        {
            "ranks": g["rank"].nunique(),
            "first_start_ns": g["start_ns"].min(),
            "skew_ns": g["start_ns"].max() - g["start_ns"].min(),
            "after_last_ns": g["end_ns"].max() - g["start_ns"].max(),
            "wait_ns": g["wait"].sum(),
            "last_rank": df.loc[g["start_ns"].idxmax(), "rank"].to_numpy(),
            "duration_ns": g["end_ns"].max() - g["start_ns"].min(),
            "collective": g["collective"].first(),
            "bytes": g["bytes"].max(),
            "group_size": g["group_size"].max(),
            "step": g["step"].max(),  # the step it was launched in ("" on every rank: none)
        }
    ).reset_index()
    return out


STRAGGLER_COLUMNS = ["rank", "collectives", "arrived_last", "arrived_last_frac", "others_waited_ns"]


def stragglers(instances: pd.DataFrame) -> pd.DataFrame:
    """Per rank: how often it entered a collective last, and how long the others waited for it then."""
    if instances.empty:
        return pd.DataFrame(columns=STRAGGLER_COLUMNS)
    g = instances.groupby("last_rank")
    out = pd.DataFrame({"arrived_last": g.size(), "others_waited_ns": g["wait_ns"].sum()}).rename_axis("rank")
    out = out.reset_index()
    out["collectives"] = len(instances)
    out["arrived_last_frac"] = out["arrived_last"] / len(instances)
    return out.sort_values("others_waited_ns", ascending=False, kind="stable").reset_index(drop=True)[STRAGGLER_COLUMNS]


def summarize_bandwidth(bandwidth: pd.DataFrame) -> pd.DataFrame:
    """Per collective name: instances, bytes, time and the bus bandwidth over all of them (sum of bytes x
    factor / sum of time: instances weighted by their time), and the best instance's; NaN where not recorded."""
    cols = ["name", "collective", "instances", "bytes", "bytes_source", "time_ns", "time_basis", "busbw_gb_per_s",
            "busbw_max_gb_per_s"]  # fmt: skip
    if bandwidth.empty:
        return pd.DataFrame(columns=cols)
    known = bandwidth["busbw_gb_per_s"].notna()
    df = bandwidth.assign(
        bus_bytes=bandwidth["busbw_gb_per_s"] * bandwidth["time_ns"], known_ns=bandwidth["time_ns"].where(known, 0)
    )
    g = df.groupby("name", sort=False)
    out = pd.DataFrame(
        {
            "collective": g["collective"].first(),
            "instances": g.size(),
            "bytes": g["bytes"].sum(min_count=1),
            "time_basis": g["time_basis"].first(),
            "time_ns": g["time_ns"].sum(),
            "bytes_source": g["bytes_source"].max(),  # "not recorded" when any instance's size is missing
            "bus_bytes": g["bus_bytes"].sum(min_count=1),
            "known_ns": g["known_ns"].sum(),
            "busbw_max_gb_per_s": g["busbw_gb_per_s"].max(),
        }
    ).reset_index()
    out["busbw_gb_per_s"] = out["bus_bytes"] / out["known_ns"].where(out["known_ns"] > 0)  # instances with bytes
    return out.sort_values("time_ns", ascending=False, kind="stable").reset_index(drop=True)[cols]


STEP_STRAGGLER_COLUMNS = ["step", "collectives", "slowest_rank", "arrived_last", "others_waited_ns", "skew_max_ns"]


def slowest_rank_by_step(instances: pd.DataFrame) -> pd.DataFrame:
    """Per step (the step the collectives were launched in): the rank the others waited for longest, how
    many of the step's collectives it entered last and how long the others waited for it then
    (STEP_STRAGGLER_COLUMNS), in step order. Instances launched outside every step are left out."""
    inst = instances[instances["step"].astype(str) != ""] if "step" in instances else instances.iloc[:0]
    if inst.empty:
        return pd.DataFrame(columns=STEP_STRAGGLER_COLUMNS)
    first = inst.groupby("step", sort=False)["first_start_ns"].min().sort_values(kind="stable")
    per = inst.groupby(["step", "last_rank"], sort=False).agg(
        arrived_last=("wait_ns", "size"), waited=("wait_ns", "sum")
    )
    per = per.reset_index().sort_values(["step", "waited", "last_rank"], ascending=[True, False, True], kind="stable")
    top = per.drop_duplicates("step").set_index("step")
    g = inst.groupby("step", sort=False)
    out = pd.DataFrame(
        {
            "collectives": g.size(),
            "slowest_rank": top["last_rank"],
            "arrived_last": top["arrived_last"],
            "others_waited_ns": top["waited"],
            "skew_max_ns": g["skew_ns"].max(),
        }
    ).reindex(first.index)
    return out.rename_axis("step").reset_index()[STEP_STRAGGLER_COLUMNS]


def summarize_collectives(instances: pd.DataFrame) -> pd.DataFrame:
    """Per collective name: instances, total and max arrival skew, time after the last arrival, total wait."""
    cols = ["name", "instances", "skew_total_ns", "skew_max_ns", "after_last_total_ns", "wait_total_ns"]
    if instances.empty:
        return pd.DataFrame(columns=cols)
    g = instances.groupby("name", sort=False)
    out = pd.DataFrame(
        {
            "instances": g.size(),
            "skew_total_ns": g["skew_ns"].sum(),
            "skew_max_ns": g["skew_ns"].max(),
            "after_last_total_ns": g["after_last_ns"].sum(),
            "wait_total_ns": g["wait_ns"].sum(),
        }
    ).reset_index()
    return out.sort_values("wait_total_ns", ascending=False, kind="stable").reset_index(drop=True)[cols]
