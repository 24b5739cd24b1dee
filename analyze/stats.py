"""Per-group statistics of integer samples (durations, sizes), as ``nsys stats`` computes them.

nsys 2022.4's summaries (gpukernsum, nvtxsum, cudaapisum, gpumemtimesum, gpumemsizesum) use SQLite
aggregate functions of its own: ``median`` is the middle value, the mean of the two middle ones for an
even count; ``stdev`` is the sample standard deviation (n - 1), 0 for a single value. Checked against
nsys's bundled sqlite3: ``stdev`` of 1, 2, 3, 10 is 4.0825 (the population one would be 3.5355),
``median`` of 1, 2, 3, 10 is 2.5.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyze.projection import expand_slices, smallest_int, sum_by

STAT_COLUMNS = ("count", "total", "avg", "med", "min", "max", "std")


def group_stats(codes: np.ndarray, values: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """count, total, avg, med, min, max, std of ``values`` per group code 0..n-1 (int64 values >= 0).

    Empty groups get count 0 and NaN elsewhere (min/max -1). The medians come from one sort of
    ``code << shift | value`` keys (a single int64 sort, no lexsort) when they fit in 63 bits, else from
    a lexsort; each group's sorted values are then a contiguous stretch, its middle read directly.
    """
    codes = np.asarray(codes, dtype=np.int64)
    values = np.asarray(values, dtype=np.int64)
    count = np.bincount(codes, minlength=n)
    total = sum_by(codes, values, n)
    has = count > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        avg = np.where(has, total / np.maximum(count, 1), np.nan)
    low, high = np.full(n, np.iinfo(np.int64).max), np.full(n, -1, dtype=np.int64)
    np.minimum.at(low, codes, values)
    np.maximum.at(high, codes, values)
    low[~has] = -1
    dev = values - avg[codes]
    squares = np.bincount(codes, weights=dev * dev, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.where(count > 1, np.sqrt(squares / (count - 1)), np.where(has, 0.0, np.nan))
    return {
        "count": count,
        "total": total,
        "avg": avg,
        "med": group_medians(codes, values, count),
        "min": low,
        "max": high,
        "std": std,
    }


SMALL_GROUP = 64  # groups of at most this many values get their medians from one sort of all their keys


def group_medians(codes: np.ndarray, values: np.ndarray, count: np.ndarray) -> np.ndarray:
    """The median of ``values`` per group code (NaN for an empty group): mean of the two middle ones when even.

    The rows are put in group order by a stable argsort of the codes in their smallest integer type (a
    radix sort for up to 32767 groups, linear time); each large group's middle comes from ``np.partition``
    of its stretch, the small ones (many NVTX names of a few instances) from one sort of their
    ``code << shift | value`` keys. A full sort of a million durations took twice as long (0.12 s).
    """
    n = len(count)
    out = np.full(n, np.nan)
    if len(values) == 0:
        return out
    order = np.argsort(codes.astype(smallest_int(n)), kind="stable")
    grouped = values[order]
    start = np.concatenate(([0], np.cumsum(count)[:-1]))
    big = np.flatnonzero(count > SMALL_GROUP)
    for g in big.tolist():
        c = int(count[g])
        middle = np.partition(grouped[start[g] : start[g] + c], [(c - 1) // 2, c // 2])
        out[g] = (middle[(c - 1) // 2] + middle[c // 2]) / 2
    small = np.flatnonzero((count > 0) & (count <= SMALL_GROUP))
    if len(small) == 0:
        return out
    rows, _ = expand_slices(start[small], start[small] + count[small])
    part, part_codes = grouped[rows], np.repeat(small, count[small])
    shift = max(int(part.max()).bit_length(), 1)
    if (n - 1).bit_length() + shift <= 62 and part.min() >= 0:
        keys = part_codes << shift
        keys |= part
        keys.sort()
        part = keys & ((1 << shift) - 1)
    else:
        part = part[np.lexsort((part, part_codes))]
    first = np.concatenate(([0], np.cumsum(count[small])[:-1]))
    c = count[small]
    out[small] = (part[first + (c - 1) // 2] + part[first + c // 2]) / 2
    return out


def stats_frame(codes: np.ndarray, values: np.ndarray, n: int, unit: str = "ns", index=None) -> pd.DataFrame:
    """``group_stats`` as columns count, total_<unit>, avg_<unit>, med_<unit>, min_<unit>, max_<unit>, std_<unit>."""
    s = group_stats(codes, values, n)
    return pd.DataFrame(
        {"count": s["count"]} | {f"{k}_{unit}": s[k] for k in STAT_COLUMNS[1:]},
        index=index,
    )
