"""Array helpers on numpy and pandas arrays: integer group sums, distinct counts, first-appearance codes,
lookups by position. Generic (nothing here knows a trace); the projection and the breakdowns use them on
million-row tables, where pandas' hashing would cost most of the time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profiler_kit.analyze.tables import one_value, one_value_view


def gather(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``values[rows]``; from a read-only view of one value (one process's pid), a view of it again."""
    return np.broadcast_to(values[:1], len(rows)) if one_value_view(values) else values[rows]


def take_rows(column: pd.Series, rows: np.ndarray):
    """``column``'s values at ``rows`` (numpy or pandas array, keeping the dtype)."""
    return column.to_numpy()[rows] if isinstance(column.dtype, np.dtype) else column.array.take(rows)


def positions(index: pd.Index, labels: np.ndarray) -> np.ndarray:
    """Positions of ``labels`` in ``index`` (-1 when absent), as ``index.get_indexer``.

    Trace tables are indexed by row number (0..n-1, or a subset of those rows), so a
    lookup table of at most a few slots per label replaces hashing a million labels.
    The result may be ``labels`` itself (labels that are positions already): read it, never write to it.
    """
    if labels.dtype.kind not in "iu" or index.dtype.kind not in "iu" or len(index) == 0 or not index.is_unique:
        return index.get_indexer(labels)
    low, high = int(index.min()), int(index.max())
    if low < 0 or high >= 4 * (len(index) + len(labels)):
        return index.get_indexer(labels)
    if isinstance(index, pd.RangeIndex) and low == 0 and index.step == 1:  # label = position
        if labels.dtype == np.int64 and (len(labels) == 0 or (labels.min() >= 0 and labels.max() <= high)):
            return labels  # every label is its position (the usual case): no fresh array to fault in
        return np.where((labels >= 0) & (labels <= high), labels, -1)
    table = np.full(high + 1, -1, dtype=np.int64)
    table[index.to_numpy()] = np.arange(len(index))
    if len(labels) == 0 or (labels.min() >= 0 and labels.max() <= high):
        return table[labels]  # every label inside the table (the usual case): no clipped copy nor masks
    return np.where((labels >= 0) & (labels <= high), table[np.clip(labels, 0, high)], -1)


def search_in_order(values: np.ndarray, queries: np.ndarray, side: str, order: np.ndarray) -> np.ndarray:
    """``np.searchsorted(values, queries, side)``, the queries asked in ``order`` (which sorts them).

    A search that lands near the previous one finds its path in cache: sorted queries (range ends
    are not: nested ranges end in reverse order) go 2-3x faster, more than the sort of the queries costs.
    """
    out = np.empty(len(queries), dtype=np.intp)
    out[order] = np.searchsorted(values, queries[order], side=side)
    return out


def expand_slices(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every i with lo[k] <= i < hi[k], in order of k then i, and the count of each slice k.

    ``np.repeat(x, counts)`` gives the ``x[k]`` of each i.
    """
    counts = np.maximum(hi - lo, 0)
    # A running sum of steps, in place: 1 within a slice, and at each slice's first item the jump from the
    # previous slice's last i. One fresh array, where repeat and arange would fault in two.
    full = np.flatnonzero(counts)
    first = lo[full]
    steps = np.ones(int(counts.sum()), dtype=np.int64)
    if len(full):
        last = first + counts[full] - 1
        steps[(np.cumsum(counts) - counts)[full]] = first - np.r_[0, last[:-1]]
    return np.cumsum(steps, out=steps), counts


def smallest_int(n: int) -> type[np.signedinteger]:
    """The smallest signed integer type that holds 0..n: per-row arrays of it take fewer fresh pages."""
    return next(t for t in (np.int8, np.int16, np.int32, np.int64) if n <= np.iinfo(t).max)


def first_appearance_codes(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes of integer keys in 0..size-1, numbered in order of first appearance (as ``pd.factorize``), and each code's first row.

    Keys over a small range go through a table of ``size`` slots: pandas hashes each key
    (~25 ns a key, 40 ms on 1.5M (range, kernel) pairs). Wider keys are hashed first.
    """
    if size > 4 * len(keys) + 1024:
        keys = pd.factorize(keys)[0]  # codes by first appearance already; the table below is then small
        size = int(keys.max()) + 1 if len(keys) else 0
    rows = np.arange(len(keys), dtype=smallest_int(len(keys)))
    first = np.full(size, len(keys), dtype=rows.dtype)  # one type: ufunc.at is 20x slower on mixed ones
    np.minimum.at(first, keys, rows)
    seen = np.flatnonzero(first < len(keys))
    seen = seen[np.argsort(first[seen], kind="stable")]  # the keys present, in order of first appearance
    renumber = np.zeros(size, dtype=np.int64)
    renumber[seen] = np.arange(len(seen))
    return renumber[keys], first[seen].astype(np.int64)


def distinct_values(values: np.ndarray) -> np.ndarray:
    """``pd.unique(values)``, without hashing when every value is the same (one GPU or one process: the usual case)."""
    return values[:1] if one_value(values) else pd.unique(values)


def sum_by(codes: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Integer sums of ``values`` per group code 0..n-1 (np.add.at stays int64-exact; bincount weights are float)."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, codes, values)
    return out


def count_distinct(codes: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Number of distinct ``values`` per group code 0..n-1 (a fast ``groupby(codes).nunique()`` on integers).

    Each (code, value) pair becomes one integer, ``code * width + value``, so one sort finds the distinct pairs
    (np.sort, not np.unique: numpy 2.4's np.unique hashes and is ~50x slower on a million keys). The keys
    are int32 when they fit (row numbers and ids of one trace mostly do): half the memory, a faster sort.
    When there are few possible pairs, a table of them replaces the sort.
    """
    if len(values) == 0:
        return np.zeros(n, dtype=np.int64)
    values = np.asarray(values, dtype=np.int64)
    new_code = codes[1:] != codes[:-1]
    if ((codes[1:] >= codes[:-1]) & (new_code | (values[1:] >= values[:-1]))).all():
        # Already sorted by (code, value), as the pairs of one thread's ranges and rising ids come: each
        # code's rows are one run, in which a row repeats a pair where its value equals the previous row's.
        # Run lengths less the (few) repeats: no per-row array but masks.
        runs = np.flatnonzero(np.concatenate(([True], new_code)))
        repeat = values[1:] == values[:-1]
        repeat &= ~new_code
        out = np.zeros(n, dtype=np.int64)
        out[codes[runs]] = np.diff(runs, append=len(codes))
        out -= np.bincount(codes[1:][repeat], minlength=n)
        return out
    low = int(values.min())
    width = int(values.max()) - low + 1
    dtype = np.int32 if n * width < 2**31 else np.int64
    keys = codes.astype(dtype)
    keys *= width
    # the sum is below n * width, which the type holds: no narrowed copy of the values (nor a shifted one from 0)
    np.add(keys, values if low == 0 else values - low, out=keys, casting="unsafe")
    if n * width <= 4 * len(keys):  # few possible pairs (ranges x kernel names): mark them in a table, no sort
        seen = np.zeros(n * width, dtype=bool)
        seen[keys] = True
        return seen.reshape(n, width).sum(axis=1)
    keys.sort()
    first = np.empty(len(keys), dtype=bool)  # first of its run of equal keys: a distinct (code, value)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    # The sorted keys of code c lie between c * width and (c + 1) * width: count the distinct ones in each
    # stretch by where the stretches start, not by dividing every key.
    bounds = np.searchsorted(keys, np.arange(n + 1, dtype=np.int64) * width)
    return np.diff(np.searchsorted(np.flatnonzero(first), bounds))
