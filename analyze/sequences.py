"""Repeating kernel sequences: the runs of n consecutive kernels on one stream that recur most, by GPU time.

A sequence that repeats thousands of times (say ``mul -> add -> tanh``) is a fusion candidate: one fused
kernel would read and write memory once and be launched once (HTA ``get_frequent_cuda_kernel_sequences``
finds them per CPU operator; here they are found over each stream's whole kernel order, overlapping
occurrences counted).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SEQUENCE_COLUMNS = ["length", "sequence", "occurrences", "total_ns", "share_frac", "kernels_ns_each"]


def kernel_sequences(ops: pd.DataFrame, lengths: tuple[int, ...] = (3, 5), top: int = 10) -> pd.DataFrame:
    """The ``top`` sequences of each length in ``lengths`` by total GPU time (SEQUENCE_COLUMNS).

    ``ops`` is ``gpu_ops(trace)``; only kernels count, in start order per (pid, device, stream).
    ``sequence`` joins the kernel names with " -> "; ``share_frac`` is of all kernel time;
    ``kernels_ns_each`` the mean time of one occurrence.
    """
    kern = ops[ops["is_kernel"].to_numpy(dtype=bool)]
    if kern.empty:
        return pd.DataFrame(columns=SEQUENCE_COLUMNS)
    stream_code, _ = pd.MultiIndex.from_arrays(
        [np.broadcast_to(kern[c].to_numpy(), len(kern)) for c in ("pid", "device_id", "stream_id")]
    ).factorize()
    order = np.lexsort((kern["start_ns"].to_numpy(), stream_code))
    names = pd.Categorical(kern["name"]).codes[order].astype(np.int64)
    labels = pd.Categorical(kern["name"]).categories
    stream = stream_code[order]
    dur = kern["duration_ns"].to_numpy()[order]
    all_ns = int(dur.sum())
    rows = []
    for n in lengths:
        if len(names) < n:
            continue
        m = len(names) - n + 1
        same = stream[:m] == stream[n - 1 :]  # the window's first and last kernel on one stream
        key = names[:m].copy()
        total = dur[:m].astype(np.int64).copy()
        for i in range(1, n):  # one dense id per distinct (previous key, next name) pair
            key = pd.factorize(key * (names.max() + 1) + names[i : i + m])[0].astype(np.int64)
            total += dur[i : i + m]
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
