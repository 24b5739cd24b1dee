"""All-reduce benchmark: how long one collective takes, per backend, size and world size.

Run under torchrun, one process per rank (gloo on CPU processes, NCCL one GPU
per rank)::

    torchrun --nproc-per-node 2 -m profiler_kit.workloads.distributed --backend gloo \
        --sizes-mb 1 10 100 1000 --out reports/ddp/allreduce_gloo.jsonl

Sizes are MiB (2**20 bytes) of float32, as torch DDP's ``bucket_cap_mb`` counts
them. Each size gets 5 warm-up all-reduces of the same tensor, then each timed
op runs between a barrier + device sync and a device sync; a row keeps the
slowest rank's time per op (a collective ends when its last rank ends).
Algorithmic bandwidth = bytes / time; bus bandwidth = algbw * 2(n-1)/n, the
per-link traffic of a ring all-reduce (NCCL-tests' definition).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist

MIB = 2**20
WARMUP = 5


def bus_factor(world_size: int) -> float:
    """Ring all-reduce moves 2(n-1)/n of the buffer over each link."""
    return 2 * (world_size - 1) / world_size


def time_all_reduce(size_bytes: int, device: torch.device, iters: int, warmup: int = WARMUP) -> list[float]:
    """Seconds per all-reduce on this rank, slowest rank's time per op (needs an initialized group)."""
    x = torch.ones(size_bytes // 4, dtype=torch.float32, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        dist.all_reduce(x)
    sync()
    times = []
    for _ in range(iters):
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        sync()
        times.append(time.perf_counter() - t0)
    # check the sum once: world_size ** (warmup + iters) overflows, so reset and reduce ones
    x.fill_(1.0)
    dist.all_reduce(x)
    if not bool((x == dist.get_world_size()).all()):
        raise RuntimeError("all_reduce returned a wrong sum")
    t = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.cpu().tolist()


def bench_row(size_bytes: int, device: torch.device, iters: int) -> dict:
    """One JSONL row: median time, algorithmic and bus bandwidth of an all-reduce of ``size_bytes``."""
    world = dist.get_world_size()
    times = time_all_reduce(size_bytes, device, iters)
    med = statistics.median(times)
    return {
        "backend": dist.get_backend(),
        "world_size": world,
        "size_bytes": size_bytes,
        "dtype": "float32",
        "warmup": WARMUP,
        "iters": iters,
        "time_s_median": med,
        "time_s_min": min(times),
        "time_s_max": max(times),
        "algbw_bytes_per_s": size_bytes / med,
        "busbw_bytes_per_s": size_bytes / med * bus_factor(world),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "gpus_on_host": torch.cuda.device_count() if device.type == "cuda" else None,
        "torch": torch.__version__,
    }


def iters_for(size_bytes: int, backend: str) -> int:
    """Fewer repeats for big CPU reductions, which take seconds each."""
    if backend == "nccl":
        return 20
    return 20 if size_bytes <= 10 * MIB else 5 if size_bytes <= 100 * MIB else 3


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    ap.add_argument("--sizes-mb", type=int, nargs="+", default=[1, 10, 100, 1000])
    ap.add_argument("--iters", type=int, default=None, help="timed ops per size (default by size and backend)")
    ap.add_argument("--out", type=Path, required=True, help="JSONL file rank 0 appends rows to")
    args = ap.parse_args(argv)

    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    if args.backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    try:
        for mb in args.sizes_mb:
            size = mb * MIB
            row = bench_row(size, device, args.iters or iters_for(size, args.backend))
            if rank == 0:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                with args.out.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(
                    f"{row['backend']} n={row['world_size']} {mb} MiB: {row['time_s_median'] * 1e3:.3f} ms "
                    f"algbw {row['algbw_bytes_per_s'] / 1e9:.2f} GB/s busbw {row['busbw_bytes_per_s'] / 1e9:.2f} GB/s",
                    flush=True,
                )
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
