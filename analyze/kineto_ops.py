"""PyTorch operators (Kineto ``cpu_op`` events) as ranges, for comparing runs whose kernels differ.

The Kineto reader keeps ``record_function`` ranges; ``diff`` also needs the ops themselves
(``aten::mm`` with its input shapes) so that the GPU time each op launched can be compared
across GPUs or libraries whose kernel names do not match (as TraceLens does). The ops come
back in the NVTX range schema, so ``project_nvtx``/``summarize_ranges`` attribute kernels to them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from profiler_kit.analyze.intervals import nesting_depth
from profiler_kit.analyze.kineto import _args, _bucket, _event_times, _frame, _ints, _load, _roles
from profiler_kit.analyze.tables import NVTX_RANGES, validate


def op_label(name: str, dims) -> str:
    """``aten::mm [[8, 64], [64, 32]]``: the op and its input shapes (just the name when it has none)."""
    if isinstance(dims, list) and any(d for d in dims):
        return f"{name} {dims}".replace("'", "")
    return name


def read_kineto_ops(path: str | Path):
    """The ``cpu_op`` events of a Kineto trace as ranges (NVTX_RANGES schema), named by ``op_label``."""
    path = Path(path)
    _, events, _ = _load(path)
    events = [e for e in _roles(_bucket(path, events))["cpu_op"] if e.get("ph") == "X"]
    start, dur = _event_times(path, events, "cpu_op")
    df = _frame(
        {
            "name": [op_label(str(e.get("name", "")), _args(e).get("Input Dims")) for e in events],
            "domain": "",
            "style": "push_pop",
            "pid": _ints(e.get("pid") for e in events),
            "tid": _ints(e.get("tid") for e in events),
            "end_tid": -1,
        },
        start,
        dur,
    )
    df["depth"] = nesting_depth(df) if len(df) else np.empty(0, dtype=np.int64)
    return validate(df, NVTX_RANGES)
