"""Collectives across ranks: arrival skew, time after the last arrival, and the rank the others wait for.

A collective kernel (taxonomy category ``communication``) cannot finish before every rank has entered it,
so a rank that arrives early spins inside the kernel: its kernel time is partly waiting, not moving data.
The k-th kernel of one name on each rank is taken as the same collective instance (NCCL runs collectives
in the same order on every rank of a communicator). Per instance:

- arrival skew = last start - first start (TraceLens' "synchronization skew", HTA's straggler signal);
- after_last_ns = last end - last start: the collective itself, once everyone is in;
- wait_ns = sum over ranks of (last start - the rank's start): time spent waiting for the last rank.

Times of different processes are compared as recorded: ranks on one host share its clock; across hosts
the skew includes any clock offset between them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

COMM_COLUMNS = ["rank", "name", "start_ns", "end_ns"]
INSTANCE_COLUMNS = [
    "name",
    "instance",
    "ranks",
    "first_start_ns",
    "skew_ns",
    "after_last_ns",
    "wait_ns",
    "last_rank",
]


def comm_kernels(ops: pd.DataFrame, rank_of_pid: dict[int, int] | None = None, rank: int | None = None) -> pd.DataFrame:
    """The communication kernels of ``gpu_ops`` with their rank: ``rank`` for a one-rank trace (Kineto's
    ``distributedInfo.rank``), else ``rank_of_pid`` (processes of a multi-process export), else the pid."""
    comm = ops[np.asarray(ops["category"] == "communication", dtype=bool) & ops["is_kernel"].to_numpy(dtype=bool)]
    pid = np.broadcast_to(comm["pid"].to_numpy(), len(comm))
    if rank is not None:
        ranks = np.full(len(comm), rank, dtype=np.int64)
    elif rank_of_pid:
        ranks = pd.Series(pid).map(rank_of_pid).fillna(-1).astype(np.int64).to_numpy()
    else:
        ranks = np.asarray(pid, dtype=np.int64)
    return pd.DataFrame(
        {
            "rank": ranks,
            "name": comm["name"].astype(str).to_numpy(),
            "start_ns": comm["start_ns"].to_numpy(),
            "end_ns": comm["end_ns"].to_numpy(),
        }
    )


def collective_instances(comm: pd.DataFrame) -> pd.DataFrame:
    """One row per collective instance seen on two ranks or more (INSTANCE_COLUMNS), in time order."""
    if comm.empty or comm["rank"].nunique() < 2:
        return pd.DataFrame(columns=INSTANCE_COLUMNS)
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
        }
    ).reset_index()
    out = out[out["ranks"] >= 2]
    return out.sort_values("first_start_ns", kind="stable").reset_index(drop=True)[INSTANCE_COLUMNS]


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
