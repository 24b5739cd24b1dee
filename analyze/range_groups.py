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

    A folded row keeps the sums (instances, CPU, GPU span and kernel totals), recomputes the averages
    and weights the ``*_frac`` category shares by kernel time; per-instance statistics that its members'
    rows cannot give (CPU median, standard deviation) are left empty. Added columns: ``members`` (names
    folded into the row, 1 for a plain range) and ``member_cpu_min_ns`` / ``_median_ns`` / ``_max_ns``,
    the spread of the members' CPU totals. Rows without a name (kernels outside every range) and plain
    ranges pass through unchanged. Rows are sorted by CPU time like the input.
    """
    patterns, fold = _patterns(ranges["range"], min_members)
    plain = ranges[~fold].assign(
        members=1,
        member_cpu_min_ns=ranges["cpu_total_ns"],
        member_cpu_median_ns=ranges["cpu_total_ns"],
        member_cpu_max_ns=ranges["cpu_total_ns"],
    )
    if not fold.any():
        return plain
    folded = _fold(ranges[fold], patterns[fold].to_numpy())
    out = pd.concat([plain, folded.reindex(columns=plain.columns)], ignore_index=True)
    return out.sort_values("cpu_total_ns", ascending=False, kind="stable").reset_index(drop=True)


def _patterns(names: pd.Series, min_members: int) -> tuple[pd.Series, np.ndarray]:
    """Each name's pattern (None for no name), and which names fold (their pattern has ``min_members`` or more)."""
    patterns = pd.Series([range_pattern(n) if isinstance(n, str) else None for n in names], index=names.index)
    return patterns, (patterns.map(patterns.value_counts()) >= min_members).to_numpy()


def fold_range_kernels(kernels: pd.DataFrame, ranges: pd.DataFrame, min_members: int = MIN_MEMBERS) -> pd.DataFrame:
    """The kernels per range (``range``, ``kernel``, ``category``, ``count``, ``total_ns``, ``share_frac``) with
    the numbered ranges of ``ranges`` folded as ``group_numbered_ranges`` folds them: per pattern and kernel,
    counts and times summed and the share taken of the pattern's kernel time; costliest kernels first per range.
    Only those six columns when anything folds (a pattern has no single instance count).
    """
    patterns, fold = _patterns(ranges["range"], min_members)
    if not fold.any() or kernels.empty:
        return kernels
    folded_names = dict(zip(ranges["range"][fold], patterns[fold], strict=True))
    key = kernels["range"].astype(object).map(lambda n: folded_names.get(n, n))
    summed = (
        kernels.assign(range=key)
        .groupby(["range", "kernel", "category"], sort=False, observed=True)[["count", "total_ns"]]
        .sum()
        .reset_index()
    )
    range_ns = (
        ranges["kernel_time_ns"].groupby(ranges["range"].astype(object).map(lambda n: folded_names.get(n, n))).sum()
    )
    summed["share_frac"] = summed["total_ns"] / summed["range"].map(range_ns).replace(0, np.nan).to_numpy()
    order = summed.assign(first=summed.groupby("range", sort=False).ngroup())
    order = order.sort_values(["first", "total_ns"], ascending=[True, False], kind="stable")
    return order.drop(columns="first").reset_index(drop=True)[
        ["range", "kernel", "category", "count", "total_ns", "share_frac"]
    ]


def numbered_members(ranges: pd.DataFrame, min_members: int = MIN_MEMBERS) -> pd.DataFrame:
    """The rows of ``ranges`` that ``group_numbered_ranges`` folds, with their ``pattern`` first, ordered by
    pattern (as the folded rows are) and then by the member's number (layer_2 before layer_10)."""
    patterns, fold = _patterns(ranges["range"], min_members)
    members = ranges[fold].assign(pattern=patterns[fold].to_numpy())
    number = [int(LAST_NUMBER.search(n).group()) for n in members["range"]]
    order = members.assign(_number=number).sort_values(["pattern", "_number"], kind="stable")
    return order.drop(columns="_number")[["pattern", *ranges.columns]].reset_index(drop=True)


def fold_phase_rows(phases: pd.DataFrame, min_members: int = MIN_MEMBERS) -> pd.DataFrame:
    """Phase rows (one per name: ``instances`` and per-instance means, as ``summarize_phases`` returns) with
    numbered names ("Warm-up Step 1" ... "5") folded: instances summed, each mean weighted by its instances.
    Added column ``members``: names folded into the row (1 for a plain phase). Order: first appearance."""
    patterns, fold = _patterns(phases["range"], min_members)
    out = phases.assign(members=1)
    if not fold.any():
        return out
    key = np.where(fold, patterns.to_numpy(dtype=object), phases["range"].to_numpy(dtype=object))
    means = [c for c in phases.columns if c not in ("range", "instances")]
    weighted = phases[means].mul(phases["instances"], axis=0).assign(instances=phases["instances"], members=1)
    grouped = weighted.groupby(key, sort=False).sum()
    grouped[means] = grouped[means].div(grouped["instances"], axis=0)
    return grouped.rename_axis("range").reset_index()[[*phases.columns, "members"]]


def _fold(ranges: pd.DataFrame, key: np.ndarray) -> pd.DataFrame:
    """One row per pattern in ``key``: sums, recomputed averages, kernel-time-weighted shares, members' spread."""
    totals = ["instances", "cpu_total_ns", "projected_instances", "gpu_span_total_ns", "kernels", "kernel_time_ns"]
    totals = [c for c in totals if c in ranges]
    fracs = [c for c in ranges.columns if c.endswith("_frac")]
    weighted = ranges[fracs].mul(ranges["kernel_time_ns"], axis=0)
    parts = pd.concat([ranges[totals], weighted, ranges["cpu_total_ns"].rename("cpu")], axis=1)
    grouped = parts.groupby(key, sort=False)
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
    return out.rename_axis("range").reset_index()
