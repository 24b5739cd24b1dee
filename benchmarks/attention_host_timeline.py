"""Where the host time of a short Triton FlashAttention-2 forward + sum + backward goes.

At short sequences a call is bound by the CPU (run 5/7: ~800 us a forward + sum + backward
at seq 1024 against ~300 us for the bare kernel launches and ~180 us for SDPA). This stamps
``perf_counter_ns`` at each layer boundary of many back-to-back calls, counts the garbage
collector's passes and their time, times each layer alone and variants that each leave one
layer out, next to SDPA, and writes a PyTorch profiler trace (CPU ops and kernels) of a few calls.
(It replaces ``benchmarks/attention_overhead.py`` of runs 5 and 7, whose rows it kept.)

    python benchmarks/attention_host_timeline.py --seq 1024 --out /tmp/host
    python benchmarks/attention_host_timeline.py --seq 4096 --d-head 128 --profile 25   # + cProfile's top 25
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

STAMPS: list[tuple[str, int]] = []


def stamp(label: str) -> None:
    STAMPS.append((label, time.perf_counter_ns()))


def per_call_us(fn, iters: int, repeats: int = 3) -> float:
    """Median over ``repeats`` of the mean host time per call of ``iters`` back-to-back calls."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        runs.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(runs)


def gc_cost(fn, iters: int) -> dict:
    """Collections per generation and their total time while ``fn`` runs ``iters`` times."""
    passes = {0: 0, 1: 0, 2: 0}
    spent = [0]
    started = [0]

    def callback(phase, info):
        if phase == "start":
            started[0] = time.perf_counter_ns()
        else:
            passes[info["generation"]] += 1
            spent[0] += time.perf_counter_ns() - started[0]

    gc.callbacks.append(callback)
    try:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    finally:
        gc.callbacks.remove(callback)
    return {"passes": passes, "us_per_call": spent[0] / iters / 1e3}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--d-head", type=int, default=64)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--out", type=Path, default=None, help="folder for the JSON results and the profiler trace")
    p.add_argument(
        "--impl-file", type=Path, help="time this copy of workloads/flash_triton.py instead (e.g. an older one)"
    )
    p.add_argument("--tag", default="", help="suffix of the output files' names")
    p.add_argument("--profile", type=int, default=0, metavar="TOP", help="cProfile of full(): the TOP functions")
    args = p.parse_args(argv)

    if args.impl_file:  # its own process: both copies register the same torch.library ops
        spec = importlib.util.spec_from_file_location("flash_triton_alt", args.impl_file)
        ft = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ft)
    else:
        from profiler_kit.workloads import flash_triton as ft

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

    class NoKernelBackward(torch.autograd.Function):
        """Our forward and saved tensors, a backward that launches nothing: graph and engine cost."""

        @staticmethod
        def forward(ctx, q, k, v):
            o, lse = ft.forward_kernels(q.view(h, n, d), k.view(h, n, d), v.view(h, n, d), True)
            ctx.save_for_backward(lse, q, k, v, o)
            return o.view(q.shape)

        @staticmethod
        def backward(ctx, do):
            lse, q, k, v, o = ctx.saved_tensors
            return q, k, v

    class Lean(NoKernelBackward):
        """The same kernels with no checks, reshapes or mode lookups around them."""

        @staticmethod
        def backward(ctx, do):
            lse, q, k, v, o = ctx.saved_tensors
            dq, dk, dv = ft.backward_kernels(
                do.reshape(h, n, d), q.view(h, n, d), k.view(h, n, d), v.view(h, n, d), o, lse, True, mode
            )
            return dq.view(q.shape), dk.view(q.shape), dv.view(q.shape)

    class Twice(torch.autograd.Function):
        """A Python-backward Function with one cheap CUDA op each way: the autograd engine's own cost."""

        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    def kernels_only():
        o, lse = ft.forward_kernels(q3, k3, v3, True)
        ft.backward_kernels(do3, q3, k3, v3, o, lse, True, mode)

    ones = torch.ones(1, h, n, d, device="cuda", dtype=torch.bfloat16)
    out = ft.flash_attention_triton(q, k, v, True)

    def no_sum():
        ft.flash_attention_triton(q, k, v, True).backward(ones)

    def graph_only():
        ft.flash_attention_triton(q, k, v, True).sum()

    def single_thread():
        with torch.autograd.set_multithreading_enabled(False):
            full()

    def sdpa_single_thread():
        with torch.autograd.set_multithreading_enabled(False):
            sdpa_full()

    def gc_off():
        full()

    rows = {
        "kernels_only": kernels_only,
        "forward_kernels": lambda: ft.forward_kernels(q3, k3, v3, True),
        "custom op forward (what torch.compile calls)": lambda: ft._fwd_op(q3, k3, v3, True),
        "flash_attention_triton forward": lambda: ft.flash_attention_triton(q, k, v, True),
        "backward_kernels": lambda: ft.backward_kernels(do3, q3, k3, v3, o3, lse, True, mode),
        "autograd backward only (graph kept)": lambda: out.backward(ones, retain_graph=True),
        "apply_forward_and_sum (graph built, no backward)": graph_only,
        "full (apply + sum + backward)": full,
        "full, gc disabled": gc_off,
        "full, engine on calling thread": single_thread,
        "apply + backward(ones), no sum": no_sum,
        "NoKernelBackward + sum + backward": lambda: NoKernelBackward.apply(q, k, v).sum().backward(),
        "Lean Function + sum + backward": lambda: Lean.apply(q, k, v).sum().backward(),
        "trivial Python-backward Function + sum + backward": lambda: Twice.apply(q).sum().backward(),
        "sdpa + sum + backward": sdpa_full,
        "sdpa, engine on calling thread": sdpa_single_thread,
    }
    results: dict = {
        "seq": n,
        "d_head": d,
        "heads": h,
        "device": torch.cuda.get_device_name(),
        "impl": str(args.impl_file or "workloads/flash_triton.py"),
        "host_us": {},
    }
    print(
        f"seq {n}, d {d}, heads {h}, bf16 causal, {results['device']}; host us per call (median of 3 x {args.iters}):"
    )
    for name, fn in rows.items():
        if name == "full, gc disabled":
            gc.disable()
        us = per_call_us(fn, args.iters)
        gc.enable()
        results["host_us"][name] = round(us, 1)
        print(f"  {name:50s} {us:9.1f}")
        for t in (q, k, v):
            t.grad = None

    results["gc_full"] = gc_cost(full, args.iters)
    print("garbage collector during full:", results["gc_full"])
    if args.profile:  # where the Python time of full() goes, function by function (its own time first)
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.iters):
            full()
        torch.cuda.synchronize()
        prof.disable()
        print(f"cProfile of full(), {args.iters} calls (us per call = tottime / {args.iters} * 1e6):")
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)

    # Timeline: stamps at each layer boundary of full(), averaged over the calls.
    orig_bwd, orig_bk, orig_fk = ft.FlashAttention2Triton.backward, ft.backward_kernels, ft.forward_kernels

    def bwd(ctx, do):
        stamp("python backward entered")
        out = orig_bwd(ctx, do)
        stamp("python backward returns")
        return out

    def bk(*a, **kw):
        stamp("backward_kernels called")
        out = orig_bk(*a, **kw)
        stamp("backward_kernels returned")
        return out

    def fk(*a, **kw):
        stamp("forward_kernels called")
        out = orig_fk(*a, **kw)
        stamp("forward_kernels returned")
        return out

    ft.FlashAttention2Triton.backward = staticmethod(bwd)
    ft.backward_kernels, ft.forward_kernels = bk, fk

    def stamped():
        stamp("start")
        o = ft.flash_attention_triton(q, k, v, True)
        stamp("apply returned")
        s = o.sum()
        stamp("sum returned")
        s.backward()
        stamp("backward() returned")

    for _ in range(20):
        stamped()
    torch.cuda.synchronize()
    STAMPS.clear()
    for _ in range(args.iters):
        stamped()
    torch.cuda.synchronize()
    ft.FlashAttention2Triton.backward, ft.backward_kernels, ft.forward_kernels = (
        staticmethod(orig_bwd),
        orig_bk,
        orig_fk,
    )
    gaps: dict[str, list[float]] = {}
    for (a, ta), (b, tb) in zip(STAMPS, STAMPS[1:], strict=False):
        if b != "start":
            gaps.setdefault(f"{a} -> {b}", []).append((tb - ta) / 1e3)
    results["timeline_us"] = {k: round(statistics.median(v), 1) for k, v in gaps.items()}
    print("timeline of full(), median us between stamps:")
    for k_, v_ in results["timeline_us"].items():
        print(f"  {k_:60s} {v_:8.1f}")

    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(10):
                with torch.profiler.record_function("full"):
                    full()
            torch.cuda.synchronize()
        prof.export_chrome_trace(str(args.out / f"host_trace_seq{n}{args.tag}.json"))
        (args.out / f"host_timeline_seq{n}{args.tag}.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
