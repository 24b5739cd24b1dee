"""The per-pair and per-op summaries, and the small array helpers under them, against plain pandas references.

``summarize_kernels``, ``range_kernel_time`` and ``summarize_range_kernels`` sum every row in place
(memops and kernels without a name in a group of their own, dropped at the end) instead of gathering
the kernel rows first; the helpers skip copies in their usual cases. Both must give what a groupby gives.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import profiler_kit.analyze.arrays as arrays
import profiler_kit.analyze.projection as projection
import pytest
from profiler_kit.analyze.breakdown import (
    count_unique,
    gpu_ops,
    op_ids,
    range_kernel_time,
    summarize_kernels,
    summarize_range_kernels,
)
from profiler_kit.analyze.sources import Source, read_trace
from profiler_kit.analyze.taxonomy import CATEGORIES

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "kineto" / "small_ctx512_train_bf16.json.gz"


def random_ops(rng: np.random.Generator, n: int = 600) -> pd.DataFrame:
    """GPU ops: kernels of a few names (some without one) in a few categories, and memops."""
    is_kernel = rng.random(n) < 0.85
    names = np.array(["gemm_a", "gemm_b", "relu", "softmax", "copy"], dtype=object)[rng.integers(0, 5, n)]
    names[rng.random(n) < 0.05] = None
    names[~is_kernel] = "[CUDA memcpy]"
    category = np.array(CATEGORIES, dtype=object)[rng.choice([5, 5, 8, 3, 6], n)]
    category[~is_kernel] = "memory"
    start = rng.integers(0, 100_000, n)
    duration = rng.integers(0, 500, n)
    return pd.DataFrame(
        {
            "start_ns": start,
            "end_ns": start + duration,
            "duration_ns": duration,
            "name": pd.Categorical(names),
            "category": pd.Categorical(category, categories=CATEGORIES),
            "is_kernel": is_kernel,
        }
    )


def random_pairs(rng: np.random.Generator, ops: pd.DataFrame, n_ranges: int = 40) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Ranges (RangeIndex) and (range, op) pairs carrying the op's columns, ranges named with repeats and gaps."""
    labels = np.array(["fwd", "bwd", "aten::mm, seq = 1", "aten::mm, seq = 2", None], dtype=object)
    ranges = pd.DataFrame({"name": labels[rng.integers(0, len(labels), n_ranges)]})
    range_row = np.sort(rng.integers(0, n_ranges - 3, 1_500))  # the last ranges enclose nothing
    op_row = rng.integers(0, len(ops), len(range_row))
    attributed = pd.DataFrame(
        {
            "range_row": range_row,
            "range": pd.Categorical(ranges["name"].to_numpy()[range_row]),
            "op_row": op_row,
        }
        | {c: ops[c].to_numpy()[op_row] if c != "name" and c != "category" else ops[c].array.take(op_row) for c in ops}
    )
    return ranges, attributed


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_summarize_kernels_is_a_groupby_of_the_kernels(seed):
    ops = random_ops(np.random.default_rng(seed))
    got = summarize_kernels(ops)
    kern = ops[ops["is_kernel"] & ops["name"].notna()]
    g = kern.groupby("name", sort=False, observed=True)
    expected = pd.DataFrame(
        {
            "category": g["category"].first().astype(str),
            "count": g.size(),
            "total_ns": g["duration_ns"].sum(),
            "min_ns": g["duration_ns"].min(),
            "max_ns": g["duration_ns"].max(),
        }
    )
    by_name = got.set_index("kernel")
    assert list(by_name.index.astype(str)) == list(
        expected.sort_values(["total_ns", "count"], ascending=False).index.astype(str)
    )
    for col in expected:
        assert (by_name[col].to_numpy() == expected.loc[by_name.index.astype(str), col].to_numpy()).all(), col


@pytest.mark.parametrize("seed", [0, 1])
def test_range_kernel_time_is_a_pivot_of_the_kernel_pairs(seed):
    rng = np.random.default_rng(seed)
    ranges, attributed = random_pairs(rng, random_ops(rng))
    got = range_kernel_time(ranges, attributed)
    kern = attributed[attributed["is_kernel"]]
    rows = pd.RangeIndex(len(ranges))
    assert (got["kernels"] == kern.groupby("range_row").size().reindex(rows, fill_value=0)).all()
    assert (got["kernel_time_ns"] == kern.groupby("range_row")["duration_ns"].sum().reindex(rows, fill_value=0)).all()
    per_cat = kern.pivot_table(
        index="range_row", columns="category", values="duration_ns", aggfunc="sum", observed=True, fill_value=0
    )
    assert list(got.columns[2:]) == [f"{c}_ns" for c in CATEGORIES if c in per_cat.columns]
    for cat in per_cat.columns:
        assert (got[f"{cat}_ns"] == per_cat[cat].reindex(rows, fill_value=0)).all()


@pytest.mark.parametrize("group", [False, True])
def test_summarize_range_kernels_is_a_groupby_of_the_kernel_pairs(group):
    rng = np.random.default_rng(5)
    _, attributed = random_pairs(rng, random_ops(rng))
    got = summarize_range_kernels(attributed, group_emit_nvtx=group)
    kern = attributed[attributed["is_kernel"]].assign(range=lambda d: d["range"].astype(object))
    if group:
        kern["range"] = kern["range"].str.replace(r", seq = .*$", "", regex=True)
    g = kern.groupby(["range", "name"], sort=False, dropna=False, observed=True)
    once = kern.drop_duplicates(["range", "op_row"])  # an op under two ranges of one name counts once
    expected = pd.DataFrame(
        {
            "range_instances": g["range_row"].nunique(),
            "count": g["op_row"].nunique(),
            "total_ns": once.groupby(["range", "name"], sort=False, dropna=False, observed=True)["duration_ns"].sum(),
        }
    )
    keys = list(zip(got["range"].astype(object), got["kernel"].astype(object), strict=True))
    assert sorted(keys, key=str) == sorted(expected.index, key=str)
    for col in expected:
        assert (got[col].to_numpy() == expected.loc[keys, col].to_numpy()).all(), col


def test_op_ids_are_the_ops_ids():
    trace = read_trace(Source(EXAMPLE, "kineto"))
    pd.testing.assert_frame_equal(op_ids(trace), gpu_ops(trace)[["correlation_id", "pid"]])


@pytest.mark.parametrize(
    "values", [np.array([3, 3, 3]), np.array([1, 2, 1]), np.array([], dtype=np.int64), np.array([1.0, np.nan, 1.0])]
)
def test_count_unique_is_nunique(values):
    assert count_unique(values) == pd.Series(values).nunique()


def test_expand_slices_is_repeat_and_arange():
    rng = np.random.default_rng(3)
    for _ in range(200):
        lo = rng.integers(0, 30, rng.integers(0, 8))
        hi = lo + rng.integers(-3, 6, len(lo))  # empty and negative slices too
        index, counts = arrays.expand_slices(lo, hi)
        expected = [i for a, b in zip(lo, hi, strict=True) for i in range(a, b)]
        assert index.tolist() == expected and counts.tolist() == np.maximum(hi - lo, 0).tolist()


def test_search_in_order_is_searchsorted():
    rng = np.random.default_rng(4)
    values, queries = np.sort(rng.integers(0, 1_000, 500)), rng.integers(-10, 1_010, 300)
    for side in ("left", "right"):
        got = arrays.search_in_order(values, queries, side, np.argsort(queries, kind="stable"))
        assert (got == np.searchsorted(values, queries, side=side)).all()


@pytest.mark.parametrize("index", [pd.RangeIndex(50), pd.Index([3, 7, 8, 20, 41])])
def test_positions_of_labels_all_in_the_index(index):  # the paths without masks (or a copy at all)
    labels = np.array(index.to_numpy()[[0, -1, 2, 2, 1]], dtype=np.int64)
    assert (arrays.positions(index, labels) == index.get_indexer(labels)).all()


def test_first_row_by_table_of_keys_all_inside():
    keys = np.array([5, 3, 5, 9, 3, 0])
    wanted = np.array([9, 5, 4, 0, 3, 3])
    assert projection.first_row_by_table(keys, wanted, 10).tolist() == [3, 0, -1, 5, 1, 1]


def test_smallest_int_holds_n():
    assert [arrays.smallest_int(n) for n in (0, 127, 128, 2**31)] == [np.int8, np.int8, np.int16, np.int64]
