"""Repeating kernel sequences: the runs of n consecutive kernels on one stream that recur most, by GPU time.

A sequence that repeats thousands of times (say ``mul -> add -> tanh``) is a fusion candidate: one fused
kernel would read and write memory once and be launched once (HTA ``get_frequent_cuda_kernel_sequences``
finds them per CPU operator; here they are found over each stream's whole kernel order, overlapping
occurrences counted).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profiler_kit.analyze.idle import stream_order

SEQUENCE_COLUMNS = ["length", "sequence", "occurrences", "total_ns", "share_frac", "kernels_ns_each"]


def kernel_sequences(ops: pd.DataFrame, lengths: tuple[int, ...] = (3, 5), top: int = 10) -> pd.DataFrame:
    """The ``top`` sequences of each length in ``lengths`` by total GPU time (SEQUENCE_COLUMNS).

    ``ops`` is ``gpu_ops(trace)``; only kernels count, in start order per (pid, device, stream).
    ``sequence`` joins the kernel names with " -> "; ``share_frac`` is of all kernel time;
    ``kernels_ns_each`` the mean time of one occurrence.
    """
    is_kernel = np.flatnonzero(ops["is_kernel"].to_numpy(dtype=bool))
    if not len(is_kernel):
        return pd.DataFrame(columns=SEQUENCE_COLUMNS)
    n_ops = len(ops)
    keys = [np.broadcast_to(ops[c].to_numpy(), n_ops)[is_kernel] for c in ("pid", "device_id", "stream_id")]
    code, _, order = stream_order(keys, ops["start_ns"].to_numpy()[is_kernel])
    rows = is_kernel[order]
    stream = code[order]
    name = pd.Categorical(ops["name"])
    names, labels = name.codes[rows].astype(np.int64), name.categories
    dur = ops["duration_ns"].to_numpy()[rows]
    running = np.concatenate([[0], np.cumsum(dur, dtype=np.int64)])  # GPU time of the first i kernels
    all_ns = int(running[-1])
    rows = []
    for n in lengths:
        if len(names) < n:
            continue
        m = len(names) - n + 1
        same = stream[:m] == stream[n - 1 :]  # the window's first and last kernel on one stream
        key = _window_ids(names, n)
        total = running[n:] - running[:m]  # each window's GPU time
        key, total = key[same], total[same]
        first = np.flatnonzero(same)
        count = np.bincount(key)
        time = np.bincount(key, weights=total)
        best = np.argsort(-time, kind="stable")[:top]
        where = np.full(len(count), -1)
        where[key[::-1]] = first[::-1]  # first occurrence of each key
        for k in best:
            if count[k] < 2:
                continue
            at = where[k]
            seq = " -> ".join(str(labels[c]) for c in names[at : at + n])
            rows.append(
                [n, seq, int(count[k]), int(time[k]), time[k] / all_ns if all_ns else np.nan, time[k] / count[k]]
            )
    return pd.DataFrame(rows, columns=SEQUENCE_COLUMNS)


def _window_ids(names: np.ndarray, n: int) -> np.ndarray:
    """A dense id per window of ``n`` consecutive name codes, numbered in order of first appearance.

    The window's codes packed as the digits of one int64 when they fit: one hash pass over the windows
    instead of one per added name (n - 1).
    """
    m = len(names) - n + 1
    base = int(names.max()) + 1
    if base**n < 2**63:
        key = names[:m].copy()
        for i in range(1, n):
            key = key * base + names[i : i + m]
        return pd.factorize(key)[0].astype(np.int64)
    key = names[:m]
    for i in range(1, n):  # one dense id per distinct (previous key, next name) pair
        key = pd.factorize(key * base + names[i : i + m])[0].astype(np.int64)
    return key
