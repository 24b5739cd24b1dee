"""Host-side cost of one Triton FlashAttention-2 call, layer by layer, where the GPU work is small.

At short sequences a call is bound by the CPU: the kernels finish before the
next launch is issued. This times many back-to-back calls (wall clock, one
device sync at the end) of each layer of the stack, from the bare autotuned
kernel launches to ``FlashAttention2Triton.apply`` + ``backward``, next to
torch SDPA, and prints a cProfile of the full forward+backward.

    python benchmarks/attention_overhead.py --seq 1024 --d-head 64
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def per_call_us(fn, iters: int) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--d-head", type=int, default=64)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--iters", type=int, default=200)
    args = p.parse_args(argv)

    from workloads import flash_triton as ft

    n, d, h = args.seq, args.d_head, args.heads
    q, k, v = (torch.randn(1, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    q3, k3, v3 = (t.detach().view(h, n, d) for t in (q, k, v))
    o3, lse = ft.forward_kernels(q3, k3, v3, True)
    do3 = torch.ones_like(o3)
    mode = ft.resolve_bwd_mode(q3, None)

    def full():
        ft.flash_attention_triton(q, k, v, True).sum().backward()

    def sdpa_full():
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

    class Twice(torch.autograd.Function):
        """A Python-backward Function with one cheap CUDA op each way: the autograd engine's own cost."""

        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    def twice_full():
        Twice.apply(q).sum().backward()

    def single_thread_full():
        with torch.autograd.set_multithreading_enabled(False):
            full()

    out = ft.flash_attention_triton(q, k, v, True)
    g = torch.ones_like(out)

    def kernels_only():
        o, lse = ft.forward_kernels(q3, k3, v3, True)
        ft.backward_kernels(do3, q3, k3, v3, o, lse, True, mode)

    rows = {
        "forward_kernels + backward_kernels": kernels_only,
        "forward_kernels (autotuned launch)": lambda: ft.forward_kernels(q3, k3, v3, True),
        "custom op forward": lambda: ft._fwd_op(q3, k3, v3, True),
        "flash_attention_triton forward": lambda: ft.flash_attention_triton(q, k, v, True),
        f"backward_kernels ({mode})": lambda: ft.backward_kernels(do3, q3, k3, v3, o3, lse, True, mode),
        "autograd backward only": lambda: out.backward(g, retain_graph=True),
        "forward + sum + backward": full,
        "same, autograd engine on the calling thread": single_thread_full,
        "trivial Python-backward Function + sum + backward": twice_full,
        "sdpa forward + sum + backward": sdpa_full,
    }
    print(f"seq {n}, d {d}, heads {h}, bf16 causal, {torch.cuda.get_device_name()}; host us per call:")
    for name, fn in rows.items():
        print(f"  {name:40s} {per_call_us(fn, args.iters):9.1f}")
        for t in (q, k, v):
            t.grad = None
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as gpu:
        for _ in range(20):
            full()
        torch.cuda.synchronize()
    print(gpu.key_averages().table(sort_by="cuda_time_total", row_limit=12))
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.iters):
        full()
    torch.cuda.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
