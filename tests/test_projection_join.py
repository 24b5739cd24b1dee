"""The fast paths of the NVTX projection against plain reference implementations, on random tables.

``launches`` joins through a binary search when runtime ids rise with the rows, a lookup
table when they are dense and a sort otherwise; all must give the first runtime row of each (pid, correlation id).
``enclosed_launches`` must give the same pairs, in the same order, as a loop over ranges.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import profiler_kit.analyze.arrays as arrays
import profiler_kit.analyze.projection as projection
import pytest
from profiler_kit.analyze.intervals import interval_union
from profiler_kit.analyze.projection import (
    enclosed_launches,
    first_row_by_search,
    first_row_by_sort,
    first_row_by_table,
    launches,
)
from profiler_kit.analyze.tables import with_columns


def reference_first_row(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    first: dict[int, int] = {}
    for row, key in enumerate(keys.tolist()):
        first.setdefault(key, row)
    return np.array([first.get(w, -1) for w in wanted.tolist()], dtype=np.int64)


@pytest.mark.parametrize("id_range", [50, 5_000, 200_000])  # dense with duplicates, dense, sparse
def test_table_and_sort_join_agree_with_first_row_wins(id_range):
    rng = np.random.default_rng(id_range)
    keys = rng.integers(0, id_range, 400)
    keys[rng.integers(0, 400, 40)] = keys[0]  # duplicated keys: the first row must win
    wanted = np.concatenate([rng.choice(keys, 300), rng.integers(0, 2 * id_range, 100)])
    expected = reference_first_row(keys, wanted)
    assert (first_row_by_sort(keys, wanted) == expected).all()
    assert (first_row_by_table(keys, wanted, int(keys.max()) + 1) == expected).all()
    assert (projection.first_row_of_key(keys, wanted) == expected).all()
    rising = np.sort(keys)  # ids in row order (one thread's calls): the search, duplicates included
    expected = reference_first_row(rising, wanted)
    assert (first_row_by_search(rising, wanted) == expected).all()
    assert (projection.first_row_of_key(rising, wanted) == expected).all()


def random_trace(rng: np.random.Generator, n_ops: int = 300, sparse: bool = False, processes: int = 2):
    """Ops and runtime rows over some processes and 3 threads, with duplicate and missing correlation ids."""
    step = 1_000 if sparse else 1  # sparse: 200k ids for 350 rows, the sort path
    cid = rng.integers(1, 200, n_ops) * step
    runtime = pd.DataFrame(
        {
            "correlation_id": np.concatenate([cid, rng.integers(-1, 200, 50) * step]),
            "pid": rng.integers(1, 1 + processes, n_ops + 50),
            "tid": rng.integers(10, 13, n_ops + 50),
            "start_ns": rng.integers(0, 10_000, n_ops + 50),
        }
    )
    runtime["end_ns"] = runtime["start_ns"] + rng.integers(0, 50, len(runtime))
    ops = pd.DataFrame({"correlation_id": cid, "pid": rng.integers(1, 3, n_ops)})  # pid 2: no runtime row if 1 process
    ops.loc[rng.integers(0, n_ops, 10), "correlation_id"] = -1
    return ops, runtime


@pytest.mark.parametrize("sparse, processes", [(False, 2), (True, 2), (False, 1)])
def test_launches_same_on_either_join(monkeypatch, sparse, processes):
    ops, runtime = random_trace(np.random.default_rng(1), sparse=sparse, processes=processes)
    default = launches(ops, runtime)
    monkeypatch.setattr(projection, "DENSE_SLOTS_PER_KEY", 0)  # always sort
    by_sort = launches(ops, runtime)
    monkeypatch.setattr(projection, "DENSE_SLOTS_PER_KEY", 10**12)  # always a table
    by_table = launches(ops, runtime)
    pd.testing.assert_frame_equal(default, by_sort)
    pd.testing.assert_frame_equal(default, by_table)
    op_rows, runtime_rows = reference_launches(ops, runtime)
    assert default["op_row"].tolist() == op_rows
    assert default["launch_start_ns"].tolist() == runtime["start_ns"].to_numpy()[runtime_rows].tolist()
    assert len(default) > 100


@pytest.mark.parametrize("processes", [1, 2])
def test_launches_with_correlation_ids_too_large_to_pack(processes):
    """A damaged export can carry ids near 2**63: the (pid, id) key must not overflow, matches stay exact."""
    ops, runtime = random_trace(np.random.default_rng(2), processes=processes)
    big = np.iinfo(np.int64).max - int(runtime["correlation_id"].max())  # the largest id is 2**63 - 1
    for df in (ops, runtime):
        df["correlation_id"] = np.where(df["correlation_id"] >= 0, df["correlation_id"] + big, -1)
    got = launches(ops, runtime)
    op_rows, runtime_rows = reference_launches(ops, runtime)
    assert got["op_row"].tolist() == op_rows and len(op_rows) > 100
    assert got["launch_start_ns"].tolist() == runtime["start_ns"].to_numpy()[runtime_rows].tolist()


@pytest.mark.parametrize("range_tid", [10, 11])  # ranges on the launching thread, or on another one
def test_one_process_and_thread_as_views_give_the_same_pairs(range_tid):
    """The reader hands one process's pid and one thread's tid over as read-only views of one value;
    ``launches`` keeps them views and ``enclosed_launches`` must pair exactly as with real arrays."""
    rng = np.random.default_rng(3)
    ops, runtime = random_trace(rng, processes=1)
    ops["pid"], runtime["pid"], runtime["tid"] = 1, 1, 10
    real = launches(ops, runtime)
    n_ops, n_rt = len(ops), len(runtime)
    viewed_ops = with_columns(ops.drop(columns="pid"), {"pid": np.broadcast_to(np.int64(1), n_ops)})
    viewed_rt = with_columns(
        runtime.drop(columns=["pid", "tid"]),
        {"pid": np.broadcast_to(np.int64(1), n_rt), "tid": np.broadcast_to(np.int64(10), n_rt)},
    )
    viewed = launches(viewed_ops, viewed_rt)
    assert viewed["pid"].to_numpy().strides == viewed["tid"].to_numpy().strides == (0,)
    pd.testing.assert_frame_equal(viewed, real, check_exact=True)
    start = rng.integers(0, 10_000, 30)
    ranges = pd.DataFrame(
        {"start_ns": start, "end_ns": start + rng.integers(0, 3_000, 30), "pid": 1, "tid": range_tid, "end_tid": -1}
    )
    for any_thread in (False, True):
        want = enclosed_launches(ranges, real, any_thread)
        got = enclosed_launches(ranges, viewed, any_thread)
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
        other_thread = range_tid == 11 and not any_thread  # nsys's view: launches of the range's own thread only
        assert len(want[0]) == 0 if other_thread else len(want[0]) > 50


def reference_launches(ops: pd.DataFrame, runtime: pd.DataFrame) -> tuple[list[int], list[int]]:
    """Matched op rows and their runtime rows: first runtime row with the op's (pid, correlation id)."""
    first: dict[tuple[int, int], int] = {}
    for row, (pid, cid) in enumerate(zip(runtime["pid"], runtime["correlation_id"], strict=True)):
        if cid >= 0:
            first.setdefault((pid, cid), row)
    matched = [
        (row, first.get((pid, cid)))
        for row, (pid, cid) in enumerate(zip(ops["pid"], ops["correlation_id"], strict=True))
    ]
    matched = [(row, rt) for row, rt in matched if rt is not None]
    return [row for row, _ in matched], [rt for _, rt in matched]


def reference_pairs(ranges: pd.DataFrame, launched: pd.DataFrame, any_thread: bool) -> list[tuple[int, int]]:
    """Pairs by thread (in order of their first projected range), range row, then launch start (ties: launch row order)."""
    thread = (
        (lambda df: list(zip(df["pid"], [0] * len(df), strict=True)))
        if any_thread
        else (lambda df: list(zip(df["pid"], df["tid"], strict=True)))
    )
    range_thread, launch_thread = thread(ranges), thread(launched)
    eligible = [any_thread or end_tid < 0 for end_tid in ranges["end_tid"]]
    threads = list(dict.fromkeys(t for t, ok in zip(range_thread, eligible, strict=True) if ok))  # by first range
    pairs = []
    for t in threads:
        mine = sorted(
            (i for i in range(len(launched)) if launch_thread[i] == t), key=lambda i: launched["launch_start_ns"][i]
        )
        for r in range(len(ranges)):
            if range_thread[r] != t or not eligible[r]:
                continue
            for i in mine:
                inside = ranges["start_ns"][r] <= launched["launch_start_ns"][i]
                inside &= launched["launch_end_ns"][i] <= ranges["end_ns"][r]
                if inside:
                    pairs.append((r, int(launched["op_row"][i])))
    return pairs


@pytest.mark.parametrize(
    "any_thread, first_tid, duration, longest",
    [
        (False, 10, None, 2_000),  # calls of random length: each candidate's end is checked
        (True, 10, None, 2_000),
        (False, 2**40, None, 2_000),  # thread ids too large to pack: numbered
        (False, 10, 30, 2_000),  # calls of one length end in start order: ends found by searchsorted
        (True, 10, 30, 2_000),
        (False, 10, None, 150),  # short ranges cover little of the trace: launches outside all are dropped first
        (True, 10, 30, 150),
    ],
)
def test_enclosed_launches_match_a_loop_over_ranges(any_thread, first_tid, duration, longest):
    rng = np.random.default_rng(7)
    n_launches, n_ranges = 2_000, 60 if longest > 1_000 else 20
    start = rng.integers(0, 5_000, n_launches)
    start[:40] = start[40:80]  # equal launch starts keep the launches' order
    launched = pd.DataFrame(
        {
            "op_row": rng.permutation(n_launches),
            "pid": rng.integers(1, 3, n_launches),
            "tid": first_tid + rng.integers(0, 3, n_launches),
            "launch_start_ns": start,
            "launch_end_ns": start + (rng.integers(0, 30, n_launches) if duration is None else duration),
        }
    )
    range_start = rng.integers(0, 5_000, n_ranges)
    ranges = pd.DataFrame(
        {
            "start_ns": range_start,
            "end_ns": range_start + rng.integers(0, longest, n_ranges),
            "pid": rng.integers(1, 3, n_ranges),
            "tid": first_tid + rng.integers(0, 4, n_ranges),  # the 4th thread launched nothing
            "end_tid": np.where(rng.random(n_ranges) < 0.1, first_tid, -1),  # some closed on another thread
        }
    )
    pos, op_rows = enclosed_launches(ranges, launched, any_thread)
    expected = reference_pairs(ranges, launched, any_thread)
    assert list(zip(pos.tolist(), op_rows.tolist(), strict=True)) == expected
    assert len(expected) > (100 if longest > 1_000 else 20)
    union_start, union_end = interval_union(ranges["start_ns"], ranges["end_ns"])
    covers_little = (union_end - union_start).sum() < np.ptp(launched["launch_start_ns"]) / 2
    assert covers_little == (longest < 1_000)  # the cases above take both ways


@pytest.mark.parametrize(
    "index",
    [
        pd.RangeIndex(50),
        pd.Index([3, 7, 8, 20, 41]),  # rows of a table (a lookup table)
        pd.Index([10**12, 5, 9]),  # too sparse for a table: hashed
        pd.RangeIndex(5, 30, 2),
    ],
)
def test_positions_are_get_indexer(index):
    labels = np.array([0, 3, 5, 7, 8, 9, 20, 41, 49, 50, 10**12, -1, 10**13])
    assert (arrays.positions(index, labels) == index.get_indexer(labels)).all()


def test_pair_labels_is_from_codes_without_unused_categories():
    labels = pd.Index(["a", "b", "c", "d"])
    codes = np.array([3, 1, -1, 3, 0])  # label of each range; -1: a range without a name
    pos = np.array([0, 2, 3, 3, 1])  # range of each pair
    expected = pd.Categorical.from_codes(codes[pos], categories=labels).remove_unused_categories()
    pd.testing.assert_series_equal(pd.Series(projection.pair_labels(codes, labels, pos)), pd.Series(expected))


@pytest.mark.parametrize("size", [40, 10**9])  # a table of slots; keys too wide for one (hashed first)
def test_first_appearance_codes_are_factorize(size):
    rng = np.random.default_rng(size)
    keys = rng.choice(rng.integers(0, size, 12), 500)
    codes, first = arrays.first_appearance_codes(keys, size)
    expected, uniques = pd.factorize(keys)
    assert (codes == expected).all()
    assert (keys[first] == uniques).all() and all(
        np.flatnonzero(keys == u)[0] == f for u, f in zip(uniques, first, strict=True)
    )


@pytest.mark.parametrize("case", ["sorted", "shuffled", "few pairs"])
def test_count_distinct_is_groupby_nunique(case):
    rng = np.random.default_rng(3)
    codes = np.sort(rng.integers(0, 50, 5_000))
    values = rng.integers(0, 10**6 if case != "few pairs" else 30, 5_000)
    values[::7] = values[1::7][: len(values[::7])]  # repeated values
    if case == "sorted":  # grouped codes, rising values within each: counted without a sort
        values = np.sort(values + codes * 10**6) - codes * 10**6
        assert (np.diff(values)[np.diff(codes) == 0] >= 0).all()
    elif case != "few pairs":
        order = rng.permutation(len(codes))
        codes, values = codes[order], values[order]
    expected = pd.Series(values).groupby(codes).nunique().reindex(range(60), fill_value=0).to_numpy()
    assert (arrays.count_distinct(codes, values, 60) == expected).all()
