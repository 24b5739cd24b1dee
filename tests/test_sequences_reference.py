"""Repeating kernel sequences (analyze/sequences.py) against a per-row Python walk that follows their definition:
windows counted and timed per stream, ranked by GPU time, sampled occurrences, and the ranges open at each
sampled kernel's launch call found by looking at every range of the thread. On every real trace in
../shared/data and on random traces (several streams and processes, rows out of order, kernels without a
launch, ranges that tie, nest or overlap)."""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from profiler_kit.analyze.breakdown import gpu_ops
from profiler_kit.analyze.sequences import (
    LAUNCHER_COLUMNS,
    NO_RANGE,
    SAMPLE_OCCURRENCES,
    SEQUENCE_COLUMNS,
    STEP_RANGE,
    OpenRanges,
    kernel_sequences,
    launch_ranges,
    launch_stacks,
)

from tests.conftest import shared_params


def ref_order(ops: pd.DataFrame) -> list[int]:
    """The kernel rows, one stream after another (streams in order of their first kernel), each by (start, row)."""
    keys = list(zip(*(ops[c].tolist() for c in ("pid", "device_id", "stream_id")), strict=True))
    streams: dict = {}
    for i in np.flatnonzero(ops["is_kernel"].to_numpy(dtype=bool)).tolist():
        streams.setdefault(keys[i], []).append(i)
    start = ops["start_ns"].tolist()
    return [i for rows in streams.values() for i in sorted(rows, key=lambda i: (start[i], i))]


class RefStacks:
    """The names of the ranges open on the launching thread at an op's launch call, outermost first (by start,
    the longest first, then row): every range of that thread looked at. None when no runtime row has the op's
    (pid, correlation id); the first such row wins."""

    def __init__(self, ops, runtime, ranges):
        self.pid, self.corr = ops["pid"].tolist(), ops["correlation_id"].tolist()
        self.calls: dict = {}
        for call in zip(runtime["pid"], runtime["correlation_id"], runtime["tid"], runtime["start_ns"], strict=True):
            self.calls.setdefault(call[:2], call)
        self.threads: dict = {}
        for i, r in enumerate(
            zip(ranges["pid"], ranges["tid"], ranges["start_ns"], ranges["end_ns"], ranges["name"], strict=True)
        ):
            self.threads.setdefault(r[:2], []).append((r[2], -r[3], i, r[4]))
        for rows in self.threads.values():
            rows.sort()
        self.starts = {key: [r[0] for r in rows] for key, rows in self.threads.items()}

    def __call__(self, row: int):
        call = self.calls.get((self.pid[row], self.corr[row]))
        if call is None:
            return None
        pid, _, tid, t = call
        started = self.threads.get((pid, tid), [])[: bisect_right(self.starts.get((pid, tid), []), t)]
        return tuple(r[3] for r in started if t < -r[1])


def ref_sequences(ops, lengths, top, runtime=None, ranges=None) -> pd.DataFrame:
    """Every window of n consecutive kernels on one stream, by names; ranked by total time, ties by where the
    names first appear among all windows of the kernel order (streams one after another, as the ids are
    numbered); each kept (2 occurrences or more), its occurrences sampled evenly, their stacks' most common
    innermost names (one name when all kernels share it) and shared outer stack."""
    order = ref_order(ops)
    labels = ops["name"].astype(object).tolist()
    names = [str(labels[i]) for i in order]
    dur = ops["duration_ns"].tolist()
    keys = list(zip(*(ops[c].tolist() for c in ("pid", "device_id", "stream_id")), strict=True))
    stream = [keys[i] for i in order]
    all_ns = sum(dur[i] for i in order)
    stack_of = RefStacks(ops, runtime, ranges) if runtime is not None else None
    rows = []
    for n in lengths:
        first_seen: dict = {}
        found: dict = {}
        for w in range(len(order) - n + 1):
            key = tuple(names[w : w + n])
            first_seen.setdefault(key, w)
            if stream[w] == stream[w + n - 1]:
                entry = found.setdefault(key, [0, []])
                entry[0] += sum(dur[i] for i in order[w : w + n])
                entry[1].append(w)
        ranked = sorted(found, key=lambda k: (-found[k][0], first_seen[k]))[:top]
        for key in ranked:
            total, starts = found[key]
            if len(starts) < 2:
                continue
            row = [n, " -> ".join(key), len(starts), total, total / all_ns, total / len(starts)]
            if runtime is not None:
                picks = sorted({round(x) for x in np.linspace(0, len(starts) - 1, SAMPLE_OCCURRENCES)})
                by, stacks = Counter(), Counter()
                for p in picks:
                    per_kernel = [stack_of(i) for i in order[starts[p] : starts[p] + n]]
                    if None in per_kernel:
                        continue
                    launchers = [s[-1] if s else NO_RANGE for s in per_kernel]  # named once when all the same
                    by[launchers[0] if len(set(launchers)) == 1 else " -> ".join(launchers)] += 1
                    common = per_kernel[0]
                    for s in per_kernel[1:]:
                        k = 0
                        while k < min(len(common), len(s)) and common[k] == s[k]:
                            k += 1
                        common = common[:k]
                    stacks[" > ".join(common) or NO_RANGE] += 1
                if by:
                    stack, times = stacks.most_common(1)[0]
                    row += [by.most_common(1)[0][0], stack, times / sum(stacks.values())]
                else:
                    row += ["", "", np.nan]
            rows.append(row)
    return pd.DataFrame(rows, columns=SEQUENCE_COLUMNS + (LAUNCHER_COLUMNS if runtime is not None else []))


def random_trace(seed: int, n: int, streams: int, pids: int = 1, kernels_first: bool = True):
    """Kernels from a few repeating patterns of names on a few streams (rows out of time order unless the seed is
    even), memcpy rows among them, runtime calls on two threads (some missing, some doubled), and nested,
    overlapping and tied ranges on those threads, ProfilerStep#N among them."""
    rng = np.random.default_rng(seed)
    patterns = [["a", "b", "c"], ["a", "b", "d", "e"], ["f"], ["c", "a"]]
    names = [k for _ in range(n) for k in patterns[rng.integers(len(patterns))]][:n]
    start = np.cumsum(rng.integers(0, 30, n))
    dur = rng.integers(1, 20, n)
    ops = pd.DataFrame(
        {
            "start_ns": start,
            "end_ns": start + dur,
            "duration_ns": dur,
            "name": pd.Categorical(names),
            "device_id": rng.integers(0, 2, n) if streams > 1 else np.zeros(n, dtype=np.int64),
            "stream_id": rng.integers(0, streams, n) + 7,
            "correlation_id": np.arange(n) + 1,
            "pid": rng.integers(0, pids, n) + 100,
            "is_kernel": (rng.random(n) < 0.9) if not kernels_first else np.arange(n) < n - n // 10,
        }
    )
    if seed % 2:
        ops = ops.sample(frac=1, random_state=seed).reset_index(drop=True)
    keep = rng.random(n) < 0.9
    ls = ops["start_ns"].to_numpy()[keep] - rng.integers(0, 50, keep.sum())
    runtime = pd.DataFrame(
        {
            "start_ns": ls,
            "end_ns": ls + 3,
            "pid": ops["pid"].to_numpy()[keep],
            "tid": rng.integers(1, 3, keep.sum()),
            "correlation_id": ops["correlation_id"].to_numpy()[keep],
        }
    )
    runtime = pd.concat([runtime, runtime.sample(frac=0.05, random_state=seed).assign(tid=9)], ignore_index=True)
    m = 4 * n
    r_start = rng.integers(-100, int(start[-1]) + 50, m)
    r_start[: m // 10] = r_start[m // 10 : 2 * (m // 10)]  # ties
    r_end = r_start + rng.integers(0, 400, m)
    r_end[-3:] = r_start[-3:] + 10**9  # ranges open the whole trace
    ranges = pd.DataFrame(
        {
            "name": pd.Categorical(rng.choice(["step", "fwd", "ProfilerStep#3", "layer", "op"], m)),
            "start_ns": r_start,
            "end_ns": r_end,
            "pid": rng.integers(0, pids, m) + 100,
            "tid": rng.integers(1, 3, m),
        }
    )
    return ops, runtime.sample(frac=1, random_state=seed).reset_index(drop=True), ranges


RANDOM = [
    dict(seed=0, n=300, streams=1),
    dict(seed=1, n=300, streams=1),
    dict(seed=2, n=400, streams=3, pids=2),
    dict(seed=3, n=400, streams=3, kernels_first=False),
    dict(seed=4, n=2, streams=1),
    dict(seed=5, n=60, streams=40),
]


def _check(ops, runtime, ranges, lengths=(2, 3, 5), top=10):
    plain = kernel_sequences(ops, lengths=lengths, top=top)
    pd.testing.assert_frame_equal(plain, ref_sequences(ops, lengths, top), check_dtype=False)
    got = kernel_sequences(ops, lengths=lengths, top=top, runtime=runtime, ranges=ranges)
    pd.testing.assert_frame_equal(got, ref_sequences(ops, lengths, top, runtime, ranges), check_dtype=False)


@pytest.mark.parametrize("case", RANDOM, ids=lambda c: f"seed{c['seed']}")
def test_sequences_equal_the_walk_on_random_traces(case):
    ops, runtime, ranges = random_trace(**case)
    kept = launch_ranges(ranges)
    assert not kept["name"].astype(str).str.match(STEP_RANGE.pattern).any()
    assert len(kept) == int((ranges["name"] != "ProfilerStep#3").sum())
    _check(ops, runtime, kept)


@pytest.mark.parametrize("path", shared_params("kineto", "*.json.gz") + shared_params("nsys_sqlite", "*.sqlite"))
def test_sequences_equal_the_walk_on_real_traces(path):
    from profiler_kit.analyze.sources import discover, read_trace

    trace = read_trace(discover([path])[0])
    ops = gpu_ops(trace)
    ranges = launch_ranges(trace.meta.get("cpu_op_ranges"), trace.nvtx)
    _check(ops, trace.runtime, ranges, lengths=(3, 5))


def test_launch_stacks_equal_the_walk():
    """Every kernel's stack (not only the sampled ones), on a trace with many ranges per block of OpenRanges."""
    ops, runtime, ranges = random_trace(7, 500, 2, pids=2)
    rows = np.arange(len(ops))
    stack_of = RefStacks(ops, runtime, ranges)
    expected = [stack_of(i) for i in rows]
    assert launch_stacks(ops, runtime, ranges, rows) == expected
    assert sum(len(s) > 1 for s in expected if s) > 100  # nested ranges were found


def test_open_ranges_at_block_edges():
    """Ranges open at t found whatever block they sit in: in a whole block before t, in the partial last one,
    at its edges; a range ending at t or starting after it is not open."""
    n = 3 * OpenRanges.BLOCK + 5
    start = np.arange(n, dtype=np.int64) * 10
    end = start + 5
    for long in (0, OpenRanges.BLOCK - 1, OpenRanges.BLOCK, 2 * OpenRanges.BLOCK + 1):
        end[long] = 10**6
    names = np.array([f"r{i}" for i in range(n)], dtype=object)
    index = OpenRanges(start, end, names)
    for t in (0, 3, 5, 10 * OpenRanges.BLOCK, 10 * (n - 1), 10 * (n - 1) + 5, 10**6, 10**7):
        expected = tuple(names[i] for i in range(n) if start[i] <= t < end[i])
        assert index.open_at(t) == expected
    assert OpenRanges(start[:0], end[:0], names[:0]).open_at(5) == ()
