"""GPU memory over a profiled run from the PyTorch profiler's allocator counters (``profile_memory=True``).

Kineto logs the caching allocator's totals after every allocation and free, so peaks are exact at event
resolution; what was allocated, by whom, needs a memory snapshot (``profiler-kit memory``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

TIMELINE_POINTS = 2000  # per device: a chart of the running totals, every peak kept


def summarize_memory_counters(counters: pd.DataFrame, start_ns: int) -> pd.DataFrame:
    """Per device: events, peak allocated and reserved and when (ns after ``start_ns``), totals at first and last event.

    The level before the first event is that event's total less its change, so a run that starts by freeing
    still has its starting level counted in the peak.
    """
    rows = []
    for dev, part in counters.groupby("device_id", sort=True):
        alloc, reserved = part["allocated_bytes"].to_numpy(), part["reserved_bytes"].to_numpy()
        time = part["time_ns"].to_numpy()
        before = int(alloc[0] - part["delta_bytes"].iat[0])
        i, j = int(np.argmax(alloc)), int(np.argmax(reserved))
        peak_alloc = max(int(alloc[i]), before)
        rows.append(
            {
                "device_id": int(dev),
                "events": len(part),
                "allocated_before_bytes": before,
                "peak_allocated_bytes": peak_alloc,
                "peak_allocated_at_ns": int(time[i] - start_ns) if alloc[i] >= before else int(time[0] - start_ns),
                "peak_reserved_bytes": int(reserved[j]),
                "peak_reserved_at_ns": int(time[j] - start_ns),
                "allocated_at_end_bytes": int(alloc[-1]),
                "reserved_at_end_bytes": int(reserved[-1]),
            }
        )
    return pd.DataFrame(rows)


def memory_counter_timeline(counters: pd.DataFrame, start_ns: int, points: int = TIMELINE_POINTS) -> pd.DataFrame:
    """Allocated and reserved over time per device (ns after ``start_ns``), in long form (``series``,
    ``bytes``) for a line chart.

    A device with more events than ``points`` keeps, in each of ``points`` equal slices of its events, the
    event where allocated is highest, so no peak is drawn lower than it was.
    """
    parts = []
    for dev, part in counters.groupby("device_id", sort=True):
        alloc = part["allocated_bytes"].to_numpy()
        if len(part) > points:
            bounds = np.linspace(0, len(part), points + 1).astype(np.int64)
            keep = np.array(
                [lo + int(np.argmax(alloc[lo:hi])) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True) if hi > lo]
            )
            part = part.iloc[keep]
        time = part["time_ns"].to_numpy() - start_ns
        for series, col in (("allocated", "allocated_bytes"), ("reserved", "reserved_bytes")):
            parts.append(
                pd.DataFrame({"time_ns": time, "bytes": part[col].to_numpy(), "series": f"cuda:{dev} {series}"})
            )
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["time_ns", "bytes", "series"])


def trace_start_ns(tables: list[pd.DataFrame], columns: list[str]) -> int:
    """The earliest time in any of ``tables`` (column ``columns[i]`` of table i); 0 when all are empty."""
    starts = [int(t[c].min()) for t, c in zip(tables, columns, strict=True) if len(t)]
    return min(starts) if starts else 0
