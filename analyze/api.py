"""CUDA API calls on the CPU (runtime and driver), summarized per function as ``nsys stats --report cudaapisum``."""

from __future__ import annotations

import numpy as np
import pandas as pd
from profiler_kit.analyze.stats import group_stats

# nsys 2022.4 drops a versioned entry point's suffix ("cudaLaunchKernel_v7000" -> "cudaLaunchKernel"): the
# last six characters when they start with "_v".
VERSION_SUFFIX = r"_v.{4}$"
API_COLUMNS = ["function", "count", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "std_ns", "share_frac"]


def summarize_api(runtime: pd.DataFrame, top: int | None = None) -> pd.DataFrame:
    """Per CUDA API function: calls, total/avg/median/min/max/std ns of their CPU time, share of all API time.

    ``runtime`` is a RUNTIME table with its names read (nsys ``CUPTI_ACTIVITY_KIND_RUNTIME``, which holds
    runtime and driver calls; Kineto's cuda_runtime and cuda_driver events). Grouped by the recorded name,
    as nsys groups by name id, then shown without the version suffix; median and sample standard deviation
    as nsys computes them (analyze/stats.py). Rows with no name ("": names not read) make an empty table.
    Sorted by total time, descending; ``top`` keeps the first rows.
    """
    names = pd.Categorical(runtime["name"])
    named = names.codes >= 0
    if not named.any() or (len(names.categories) == 1 and names.categories[0] == ""):
        return pd.DataFrame(columns=API_COLUMNS)
    codes = names.codes.astype(np.int64)
    durations = runtime["duration_ns"].to_numpy()
    if not named.all():
        codes, durations = codes[named], durations[named]
    n = len(names.categories)
    s = group_stats(codes, durations, n)
    has = s["count"] > 0
    out = pd.DataFrame(
        {
            "function": pd.Series(names.categories[has].astype(str)).str.replace(VERSION_SUFFIX, "", regex=True),
            "count": s["count"][has],
            "total_ns": s["total"][has],
            "avg_ns": s["avg"][has],
            "med_ns": s["med"][has],
            "min_ns": s["min"][has],
            "max_ns": s["max"][has],
            "std_ns": s["std"][has],
        }
    )
    total = out["total_ns"].sum()
    out["share_frac"] = out["total_ns"] / total if total else np.nan
    out = out.sort_values(["total_ns", "count"], ascending=False, kind="stable").reset_index(drop=True)
    return out.head(top) if top else out
