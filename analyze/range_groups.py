"""Numbered ranges (``layer_0`` ... ``layer_47``, ``Warm-up Step 1`` ... ``5``) folded into one row per pattern.

A model annotated per layer or per step has dozens of range names that differ only in a number; listed one
by one they push every other range out of the table. Folded, each pattern keeps its totals and the spread of
its members, so an odd layer still shows (its member max far from the median).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

LAST_NUMBER = re.compile(r"\d+(?=\D*$)")
MIN_MEMBERS = 3  # distinct names sharing a pattern before they are folded (two could be "fwd1"/"fwd2" by chance)


def range_pattern(name: str) -> str:
    """The name with its last number replaced by ``{n}`` ("layer_12.attn" -> "layer_{n}.attn")."""
    return LAST_NUMBER.sub("{n}", name, count=1)


def group_numbered_ranges(ranges: pd.DataFrame, min_members: int = MIN_MEMBERS) -> pd.DataFrame:
    """``ranges`` (one row per range name, as ``summarize_ranges`` returns) with numbered names folded.

    Sums stay sums (instances, CPU, GPU span and kernel totals); averages are recomputed from them;
    ``*_frac`` category shares are weighted by kernel time. Added columns: ``members`` (names folded
    into the row, 1 for a plain range) and ``member_cpu_min_ns`` / ``_median_ns`` / ``_max_ns``, the
    spread of the members' CPU totals. Rows are sorted by CPU time like the input.
    """
    names = ranges["range"].astype(str)
    patterns = names.map(range_pattern)
    members = names.groupby(patterns).transform("nunique")
    key = patterns.where(members >= min_members, names)
    totals = ["instances", "cpu_total_ns", "projected_instances", "gpu_span_total_ns", "kernels", "kernel_time_ns"]
    totals = [c for c in totals if c in ranges]
    fracs = [c for c in ranges.columns if c.endswith("_frac")]
    weighted = ranges[fracs].mul(ranges["kernel_time_ns"], axis=0) if fracs else ranges[[]]
    parts = pd.concat([ranges[totals], weighted, ranges["cpu_total_ns"].rename("cpu")], axis=1)
    grouped = parts.groupby(key.to_numpy(), sort=False)
    out = grouped[totals].sum()
    out["members"] = grouped.size()
    out["member_cpu_min_ns"] = grouped["cpu"].min()
    out["member_cpu_median_ns"] = grouped["cpu"].median()
    out["member_cpu_max_ns"] = grouped["cpu"].max()
    out["cpu_avg_ns"] = out["cpu_total_ns"] / out["instances"]
    if "gpu_span_total_ns" in out:
        out["gpu_span_avg_ns"] = out["gpu_span_total_ns"] / out["projected_instances"].replace(0, np.nan)
    kernel_ns = out["kernel_time_ns"].replace(0, np.nan)
    for col in fracs:
        out[col] = (grouped[col].sum() / kernel_ns).fillna(0)
    out = out.rename_axis("range").reset_index()
    order = [c for c in ranges.columns if c in out] + [c for c in out.columns if c not in ranges]
    return out[order].sort_values("cpu_total_ns", ascending=False, kind="stable").reset_index(drop=True)
