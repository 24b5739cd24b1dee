"""Memcpy bandwidth per kind (host-to-device, device-to-host, device-to-device, peer), and its ceiling.

Achieved bandwidth of a kind is its bytes over its GPU time (sum of durations): the rate while copying,
not over the trace. The ceiling is the best any single copy of that kind reached in this trace
(copies of at least CEILING_MIN_BYTES, so that a tiny copy's fixed cost does not set it); a kind far
below its own ceiling moves its bytes in many small or pageable copies.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

CEILING_MIN_BYTES = 1 << 20  # copies this large and larger set the ceiling

COPY_COLUMNS = ["kind", "copies", "bytes", "total_ns", "gb_per_s", "ceiling_gb_per_s", "of_ceiling_frac"]


def copy_bandwidth(memops: pd.DataFrame) -> pd.DataFrame:
    """Per memcpy name (nsys wording, "[CUDA memcpy Host-to-Device]"): copies, bytes, time and GB/s (1e9 B/s)."""
    copies = memops[(memops["kind"] == "memcpy").to_numpy(dtype=bool)]
    if copies.empty:
        return pd.DataFrame(columns=COPY_COLUMNS)
    dur = copies["duration_ns"].to_numpy()
    size = copies["size_bytes"].to_numpy()
    rate = np.where((dur > 0) & (size >= CEILING_MIN_BYTES), size / np.maximum(dur, 1), np.nan)
    code, kinds = name_groups(copies["name"])
    rows = []
    for g in range(len(kinds)):  # a handful of copy kinds
        mine = code == g
        r = rate[mine]
        r = r[~np.isnan(r)]
        rows.append(
            (int(mine.sum()), int(np.maximum(size[mine], 0).sum()), int(dur[mine].sum()), r.max() if len(r) else np.nan)
        )
    out = pd.DataFrame(rows, columns=["copies", "bytes", "total_ns", "ceiling"], index=pd.Index(kinds, name="kind"))
    out["gb_per_s"] = out["bytes"] / out["total_ns"].where(out["total_ns"] > 0)
    out["ceiling_gb_per_s"] = out["ceiling"]
    out["of_ceiling_frac"] = out["gb_per_s"] / out["ceiling_gb_per_s"]
    return (
        out.reset_index().sort_values("total_ns", ascending=False, kind="stable")[COPY_COLUMNS].reset_index(drop=True)
    )


def name_groups(names: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """A code per row into the distinct names in order of first appearance (missing names: -1, in no group),
    as ``groupby(names.astype(str), sort=False)`` groups them; taken from the category codes, not from the
    name of every copy made a string."""
    cat = pd.Categorical(names)
    code, first = pd.factorize(cat.codes[cat.codes >= 0])
    out = np.full(len(cat), -1, dtype=np.int64)
    out[cat.codes >= 0] = code
    return out, pd.Index(cat.categories[first].astype(str))
