"""Hand-built snapshot dicts for the memory tests (the format of torch.cuda.memory._snapshot())."""

from __future__ import annotations

import bisect
import gzip
import pickle
from pathlib import Path

import numpy as np
import pandas as pd

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
    from profiler_kit.analyze.memory_snapshot import load_snapshot_dict

    return load_snapshot_dict(path)


def segment(addr: int, blocks: list[tuple[int, str, list]], device: int = 0, pool: str = "large", **extra) -> dict:
    """A segment dict as torch writes it: blocks laid out from ``addr`` in order, (size, state, frames) each."""
    out, offset = [], addr
    for size, state, frames in blocks:
        requested = size - 8 if state == "active_allocated" else 0
        out.append({"address": offset, "size": size, "requested_size": requested, "state": state, "frames": frames})
        offset += size
    allocated = sum(b["size"] for b in out if b["state"] == "active_allocated")
    return {
        "device": device, "address": addr, "total_size": offset - addr, "allocated_size": allocated,
        "active_size": allocated, "requested_size": sum(b["requested_size"] for b in out), "stream": 0,
        "segment_type": pool, "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": out, **extra,
    }  # fmt: skip


def segments_only_snapshot(n: int = 1457, devices: int = 1) -> dict:
    """What _dump_snapshot writes when history was never recorded: segments (blocks without frames), empty traces.

    Segment i on device d: 20 MiB with an allocated block of (i % 7 + 1) MiB, a free gap of 1 MiB, another
    allocated block of 2 MiB, the rest free; every 5th segment is a 2 MiB small-pool one with one 512-byte block.
    """
    segs = []
    for d in range(devices):
        for i in range(n):
            addr = (d + 1 << 44) + i * (32 * MiB)
            if i % 5 == 4:
                segs.append(segment(addr, [(512, "active_allocated", []), (2 * MiB - 512, "inactive", [])], d, "small"))
                continue
            a = (i % 7 + 1) * MiB
            blocks = [(a, "active_allocated", []), (MiB, "inactive", []), (2 * MiB, "active_allocated", [])]
            segs.append(segment(addr, blocks + [(20 * MiB - a - 3 * MiB, "inactive", [])], d))
    return {"segments": segs, "device_traces": [[] for _ in range(devices)], "allocator_settings": {}}


G = 1 << 30
A = 1 << 42  # a 1 GiB large-pool segment


def oom_snapshot(device_free: int) -> dict:
    """A trace that ends in an OOM, laid out as the allocator records it.

    A 1 GiB segment holds a 600 MiB block (freed) and a 300 MiB block (live); a
    request of 800 MiB then finds no free block (600 and 124 MiB), cudaMalloc
    fails, and the oom entry carries ``device_free`` (no ``addr``). Allocated at the
    OOM: 300 MiB; reserved 1 GiB; cached but unallocated 724 MiB.
    """
    big = [USER, TORCH]
    trace = [
        event("segment_alloc", A, G, 100),
        event("alloc", A, 600 * MiB, 101, big),
        event("alloc", A + 600 * MiB, 300 * MiB, 102, big),
        event("free_requested", A, 600 * MiB, 103, big),
        event("free_completed", A, 600 * MiB, 104, big),
        {"action": "oom", "device_free": device_free, "size": 800 * MiB, "stream": 0, "time_us": 105, "frames": big},
    ]
    blocks = [(600 * MiB, "inactive", []), (300 * MiB, "active_allocated", big), (124 * MiB, "inactive", [])]
    segs = [segment(A, blocks)]
    segs[0]["blocks"][1]["requested_size"] = 300 * MiB
    return {"segments": segs, "device_traces": [trace], "allocator_settings": {}, "external_annotations": []}


KSMALL_SIZE = 1 << 20


def reference_block_sizes(
    events: pd.DataFrame, rounded: np.ndarray, initial_live: list[int], initial_segs: dict[int, int], expandable: bool
) -> tuple[np.ndarray, int]:
    """The allocator's split rule replayed event by event (analyze.memory._block_sizes before it was vectorized).

    Allocator block size for every alloc event (other rows: 0), and how many large allocs had no known segment.

    Small-pool blocks and expandable segments always split, so the block is the
    rounded request. A large-pool block starts a free region that ends at the
    next live block or the segment end; it is split only when more than 1 MiB
    would remain.
    """
    out = np.where(events["action"].to_numpy() == "alloc", rounded, 0)
    large = (events["action"].to_numpy() == "alloc") & (rounded > KSMALL_SIZE)
    if expandable or not large.any():
        return out, 0
    seg_starts = sorted(initial_segs)
    seg_size = dict(initial_segs)
    seg_live: dict[int, list[int]] = {start: [] for start in seg_starts}  # live block starts per segment

    def segment_of(addr: int) -> int | None:
        j = bisect.bisect_right(seg_starts, addr) - 1
        return seg_starts[j] if j >= 0 and addr < seg_starts[j] + seg_size[seg_starts[j]] else None

    for addr in initial_live:
        seg = segment_of(addr)
        if seg is not None:
            bisect.insort(seg_live[seg], addr)
    unknown = 0
    action_arr = events["action"].astype(str).to_numpy()
    # small-pool blocks sit in small-pool segments, so they never bound a large block: skip their events
    keep = np.flatnonzero(
        large
        | ((action_arr == "free_completed") & (rounded > KSMALL_SIZE))
        | np.isin(action_arr, ["segment_alloc", "segment_free"])
    )
    actions = action_arr[keep].tolist()
    addrs = events["addr"].to_numpy()[keep].tolist()
    sizes = events["size_bytes"].to_numpy()[keep].tolist()
    for i, action, addr, size in zip(keep.tolist(), actions, addrs, sizes, strict=True):
        if action == "alloc":
            seg = segment_of(addr)
            if seg is None:
                unknown += 1
                continue
            live = seg_live[seg]
            k = bisect.bisect_right(live, addr)
            end = live[k] if k < len(live) else seg + seg_size[seg]
            if end - addr - rounded[i] <= KSMALL_SIZE:
                out[i] = end - addr
            live.insert(k, addr)
        elif action == "free_completed":
            seg = segment_of(addr)
            live = seg_live.get(seg) if seg is not None else None
            if live:
                k = bisect.bisect_left(live, addr)
                if k < len(live) and live[k] == addr:
                    del live[k]
        elif action == "segment_alloc":
            bisect.insort(seg_starts, addr)
            seg_size[addr] = size
            seg_live[addr] = []
        elif action == "segment_free" and addr in seg_size:
            seg_starts.remove(addr)
            del seg_size[addr], seg_live[addr]
    return out, unknown


def random_trace(rng: np.random.Generator, n: int = 400) -> tuple[pd.DataFrame, dict[int, int], list[int]]:
    """Events over a few large segments (some allocated and freed mid-trace, some allocs outside any segment),
    with blocks live before the trace: input for both block-size replays. No address is allocated twice while live."""
    segs = {(k + 1) << 32: int(rng.integers(4, 40)) * MiB for k in range(3)}
    initial = dict(list(segs.items())[:2])
    live: dict[int, int] = {}
    pre = []
    for base, size in initial.items():
        for _ in range(2):
            a = base + int(rng.integers(0, size // MiB)) * MiB
            if a not in live:
                live[a] = int(rng.integers(1, 3)) * MiB + 512
                pre.append(a)
    alive = set(initial)
    rows = []
    for _ in range(n):
        r = rng.random()
        dead = [b for b in segs if b not in alive]
        if r < 0.05 and dead:
            b = dead[0]
            alive.add(b)
            rows.append(("segment_alloc", b, segs[b]))
        elif r < 0.08 and alive:
            b = sorted(alive)[-1]
            if not any(b <= a < b + segs[b] for a in live):
                alive.discard(b)
                rows.append(("segment_free", b, segs[b]))
        elif r < 0.55 or not live:
            b = sorted(alive)[int(rng.integers(0, len(alive)))] if alive and rng.random() > 0.03 else 9 << 40
            a = b + int(rng.integers(0, 64)) * (MiB // 2)
            if a in live:
                continue
            live[a] = int(rng.integers(1, 2 * KSMALL_SIZE // 512 * 4)) * 512 + int(rng.integers(0, 512))
            rows.append(("alloc", a, live[a]))
        else:
            a = list(live)[int(rng.integers(0, len(live)))]
            size = live.pop(a)
            rows += [("free_requested", a, size), ("free_completed", a, size)]
    ev = pd.DataFrame(rows, columns=["action", "addr", "size_bytes"])
    ev["action"] = ev["action"].astype("category")
    ev["seq"] = np.arange(len(ev))
    return ev, initial, pre
