"""``repeated_pairs`` (which rows the ``count`` and ``total_ns`` of range_kernels skip) against ``groupby(...).nunique()``.

Its fast path needs every (range name, op) row distinct; an op under two nested ranges of one
name takes a sort instead. Both must count each op once per pair.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from profiler_kit.analyze.breakdown import repeated_pairs


def distinct_ops_per_pair(pair, range_codes, op_rows, n):
    """Ops per (range name, kernel) pair less the repeated rows, as summarize_range_kernels counts them."""
    repeats = repeated_pairs(range_codes, op_rows)
    return np.bincount(pair if repeats is None else pair[~repeats], minlength=n)


@pytest.mark.parametrize("nested", [False, True])  # no name nested in itself; some ops under two same-name ranges
def test_distinct_ops_per_pair_is_groupby_nunique(nested):
    rng = np.random.default_rng(7)
    ops = 2_000
    kernel = rng.integers(0, 5, ops)  # each op's kernel name
    range_codes = rng.integers(-1, 4, ops)  # each op's enclosing range name (-1: no name)
    op_rows = np.arange(ops)
    if nested:  # a second row for some ops, under another range of the same name
        again = rng.integers(0, ops, 300)
        op_rows, range_codes = np.concatenate([op_rows, again]), np.concatenate([range_codes, range_codes[again]])
    pair = pd.factorize((range_codes + 1) * 5 + kernel[op_rows])[0]
    n = int(pair.max()) + 3  # two codes without rows
    expected = pd.Series(op_rows).groupby(pair).nunique().reindex(range(n), fill_value=0).to_numpy()
    assert (distinct_ops_per_pair(pair, range_codes, op_rows, n) == expected).all()


def test_distinct_ops_per_pair_of_no_rows():
    empty = np.zeros(0, dtype=np.int64)
    assert (distinct_ops_per_pair(empty, empty, empty, 3) == 0).all()
