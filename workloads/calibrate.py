"""This machine's own ceilings: GEMM throughput per dtype and device-memory copy bandwidth.

Reports compare achieved FLOP/s and bytes/s of kernel categories against these
measured figures rather than datasheet numbers (METHOD.md: "measure the two
ceilings once"). Inputs are random (zeros run faster on tensor cores). Each
figure is the median of timed repetitions after warm-up, timed with CUDA
events on a GPU and perf_counter on the CPU.

Run: ``python -m profiler_kit.workloads.calibrate --out calibration.json``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from profiler_kit.workloads.common import emit_json

GEMM_DTYPES = ("fp32", "tf32", "bf16", "fp16")


def _time_ms(fn, device: str, warmup: int, reps: int) -> float:
    """Median ms of ``fn()`` over ``reps`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def gemm_tflops(dtype: str, n: int, device: str, warmup: int = 3, reps: int = 10) -> dict:
    """n x n x n matmul throughput (2 n^3 FLOP per product). "tf32" is fp32 with TF32 matmuls allowed."""
    torch_dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        a = torch.randn(n, n, device=device, dtype=torch_dtype)
        b = torch.randn(n, n, device=device, dtype=torch_dtype)
        ms = _time_ms(lambda: a @ b, device, warmup, reps)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return {"dtype": dtype, "n": n, "median_ms": ms, "tflops": 2 * n**3 / (ms * 1e-3) / 1e12}


def copy_bandwidth(nbytes: int, device: str, warmup: int = 3, reps: int = 20) -> dict:
    """Device-to-device copy of ``nbytes``; bandwidth counts bytes read plus bytes written."""
    src = torch.randn(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    ms = _time_ms(lambda: dst.copy_(src), device, warmup, reps)
    moved = 2 * src.numel() * 4
    return {"bytes": moved, "median_ms": ms, "bytes_per_s": moved / (ms * 1e-3)}


def calibrate(device: str | None = None, n: int | None = None, copy_bytes: int | None = None) -> dict:
    """GEMM TFLOP/s per dtype and D2D copy bytes/s for ``device`` (sizes shrink on the CPU)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = torch.device(device).type == "cuda"
    n = n or (8192 if cuda else 512)
    copy_bytes = copy_bytes or (2**30 if cuda else 2**26)
    dtypes = GEMM_DTYPES if cuda else ("fp32", "bf16")
    return {
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "torch": torch.__version__,
        "gemm": {d: gemm_tflops(d, n, device) for d in dtypes},
        "copy": copy_bandwidth(copy_bytes, device),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Measure GEMM TFLOP/s per dtype and D2D copy bandwidth.")
    ap.add_argument("--device")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    emit_json(calibrate(args.device), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
