"""interval_union's two ways (sorting starts and ends apart, or sweeping by start) against each other."""

from __future__ import annotations

import numpy as np
import pytest
from profiler_kit.analyze.intervals import interval_union, union_length


def sweep_union(starts, ends):
    """Reference: sort by start, merge while the next start is within the furthest end so far."""
    merged: list[list[int]] = []
    for s, e in sorted(zip(starts.tolist(), ends.tolist(), strict=True)):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [m[0] for m in merged], [m[1] for m in merged]


@pytest.mark.parametrize("seed", range(5))
def test_union_matches_a_sweep_with_nested_touching_and_empty_intervals(seed):
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, 1_000, 300)
    ends = starts + rng.choice([0, 1, 5, 50, 400], 300)  # empty, short, nested and long intervals
    starts[:20] = ends[20:40]  # intervals that touch others
    s, e = interval_union(starts, ends)
    ref_s, ref_e = sweep_union(starts, ends)
    assert s.tolist() == ref_s and e.tolist() == ref_e
    assert union_length(starts, ends) == sum(b - a for a, b in zip(ref_s, ref_e, strict=True))


def test_union_with_an_end_before_its_start_still_sweeps():
    # not a valid interval; the sweep keeps the old answer rather than the sorted-apart shortcut
    s, e = interval_union(np.array([10, 0]), np.array([5, 20]))
    assert s.tolist() == [0] and e.tolist() == [20]
    assert union_length(np.array([10, 0]), np.array([5, 20])) == 20
