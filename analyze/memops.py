"""GPU memory operations (memcpy by direction, memset): time and bytes, as ``nsys stats`` gpumemtimesum and gpumemsizesum."""

from __future__ import annotations

import numpy as np
import pandas as pd
from profiler_kit.analyze.stats import STAT_COLUMNS, group_stats

MEMOP_COLUMNS = [
    "operation",
    "count",
    *(f"{s}_ns" for s in STAT_COLUMNS[1:]),
    *(f"{s}_bytes" for s in STAT_COLUMNS[1:]),
    "bandwidth_gb_per_s",
    "share_frac",
]


def summarize_memops(memops: pd.DataFrame) -> pd.DataFrame:
    """Per memory operation name ("[CUDA memcpy Host-to-Device]", "[CUDA memset]"...): time and size statistics.

    Columns: operation, count, total/avg/med/min/max/std ns (as ``gpumemtimesum``), the same of
    bytes (as ``gpumemsizesum``; avg, med and std are floats), bandwidth_gb_per_s (total bytes over
    total time, 1e9 bytes a second: the average rate while the operations ran) and share_frac (of all
    memop time). Medians and sample standard deviations as nsys computes them (analyze/stats.py).
    Sorted by total time, descending.
    """
    names = pd.Categorical(memops["name"])
    named = names.codes >= 0
    if not named.any():
        return pd.DataFrame(columns=MEMOP_COLUMNS)
    codes = names.codes.astype(np.int64)[named]
    n = len(names.categories)
    time = group_stats(codes, memops["duration_ns"].to_numpy()[named], n)
    size = group_stats(codes, np.maximum(memops["size_bytes"].to_numpy()[named], 0), n)
    has = time["count"] > 0
    return memop_table(
        names.categories[has], {k: v[has] for k, v in time.items()}, {k: v[has] for k, v in size.items()}
    )


def memop_table(names: pd.Index, time: dict[str, np.ndarray], size: dict[str, np.ndarray]) -> pd.DataFrame:
    """The table of ``summarize_memops`` from each name's time and size statistics (``group_stats``'s, one row a name,
    in the names' sorted order): also made from a windowed export's merged statistics (``analyze.windows``)."""
    out = pd.DataFrame(
        {"operation": names.astype(str), "count": time["count"]}
        | {f"{s}_ns": time[s] for s in STAT_COLUMNS[1:]}
        | {f"{s}_bytes": size[s] for s in STAT_COLUMNS[1:]}
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        out["bandwidth_gb_per_s"] = np.where(out["total_ns"] > 0, out["total_bytes"] / out["total_ns"], np.nan)
    total = out["total_ns"].sum()
    out["share_frac"] = out["total_ns"] / total if total else np.nan
    return out.sort_values(["total_ns", "count"], ascending=False, kind="stable").reset_index(drop=True)
