"""Hand-built snapshot dicts for the memory tests (the format of torch.cuda.memory._snapshot())."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

S = 1 << 40  # a large-pool segment of 20 MiB
T = 1 << 41  # a small-pool segment of 2 MiB
MiB = 1 << 20

USER = {"filename": "/home/u/proj/model.py", "line": 385, "name": "forward"}
TORCH = {
    "filename": "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py",
    "line": 1790,
    "name": "_call_impl",
}
CPP = {"filename": "??", "line": 0, "name": "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"}


def event(action, addr, size, t, frames=None, **extra):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": frames or [], **extra}


def known_peak_snapshot() -> dict:
    """A trace with a known peak: a 19.5 MiB request fills a 20 MiB segment whole (no split).

    allocated after each event: 0, 20 MiB, 20 MiB, 20 MiB + 1024 (peak), 1024, 1024, 1536.
    """
    trace = [
        event("segment_alloc", S, 20 * MiB, 10),
        event("alloc", S, 20 * MiB - MiB // 2, 11, [CPP, USER, TORCH]),
        event("segment_alloc", T, 2 * MiB, 12),
        event("alloc", T, 1000, 13, [TORCH, USER]),
        event("free_requested", S, 20 * MiB - MiB // 2, 14),
        event("free_completed", S, 20 * MiB - MiB // 2, 15),
        event("alloc", T + 1024, 512, 16, [USER]),
    ]
    segments = [
        {
            "device": 0, "address": S, "total_size": 20 * MiB, "allocated_size": 0, "active_size": 0,
            "requested_size": 0, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [],
            "blocks": [{"address": S, "size": 20 * MiB, "requested_size": 0, "state": "inactive", "frames": []}],
        },
        {
            "device": 0, "address": T, "total_size": 2 * MiB, "allocated_size": 1536, "active_size": 1536,
            "requested_size": 1512, "stream": 0, "segment_type": "small", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [],
            "blocks": [
                {"address": T, "size": 1024, "requested_size": 1000, "state": "active_allocated", "frames": [USER]},
                {"address": T + 1024, "size": 512, "requested_size": 512, "state": "active_allocated", "frames": [USER]},
                {"address": T + 1536, "size": 2 * MiB - 1536, "requested_size": 0, "state": "inactive", "frames": []},
            ],
        },
    ]  # fmt: skip
    return {
        "segments": segments,
        "device_traces": [trace],
        "allocator_settings": {"expandable_segments": False, "max_split_size": -1},
        "external_annotations": [],
    }


def write(path: Path, data, gz: bool = False) -> Path:
    raw = pickle.dumps(data)
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def load_fixture(path: Path) -> dict:
    """A committed fixture as a plain dict (trusted: recorded by benchmarks/gpu_memory_snapshot.py)."""
    from analyze.memory_snapshot import load_snapshot_dict

    return load_snapshot_dict(path)
