"""Where the host time of a short Triton FlashAttention-2 forward + sum + backward goes.

At short sequences a call is bound by the CPU: the GPU waits for launches. This times each layer alone and variants
that each leave one layer out, next to SDPA (host us per call of back-to-back calls), counts the garbage
collector's passes, and stamps ``perf_counter_ns`` at each layer boundary and around every kernel launch of
synchronized calls, with the autograd engine on its device thread (the default) and on the calling thread (where
our Python backward ran up to twice as fast, issue 26); ``--out`` adds a PyTorch profiler trace of a few calls.
(It replaces ``attention_overhead.py`` of runs 5 and 7 and ``attention_host_stamps.py`` of the sixth session.)

    python benchmarks/attention_host_timeline.py --seq 1024 --out /tmp/host
    python benchmarks/attention_host_timeline.py --seq 4096 --d-head 128 --profile 25   # + cProfile's top 25
    python benchmarks/attention_host_timeline.py --seq 4096 --d-head 128 --kv-heads 4   # grouped-query heads
"""

from __future__ import annotations

import argparse
import contextlib
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


def _name(kernel) -> str:
    while hasattr(kernel, "fn"):  # Autotuner -> Heuristics -> JITFunction -> the Python function
        kernel = kernel.fn
    return kernel.__name__


@contextlib.contextmanager
def stamped_launches(ft):
    """Stamps around ``ft``'s forward and backward, the Function's Python backward and every kernel launch of
    ``ft``, ``gluon_tiles`` and the Gluon modules (``launch``/``launch_keyed``, labelled by kernel), restored on
    exit."""
    wrapped = []

    def wrap(owner, name, label=None):
        fn = getattr(owner, name)
        if isinstance(fn, staticmethod):
            fn = fn.__func__

        def stamped(*a, **kw):
            what = label or f"{name} {_name(a[1] if name == 'launch_keyed' else a[0])}"
            stamp(what + " called")
            out = fn(*a, **kw)
            stamp(what + " returned")
            return out

        wrapped.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, staticmethod(stamped) if isinstance(owner, type) else stamped)

    wrap(ft, "forward_kernels", "forward_kernels")
    wrap(ft, "backward_kernels", "backward_kernels")
    wrap(ft.FlashAttention2Triton, "backward", "python backward")
    from profiler_kit.workloads import gluon_tiles  # the Gluon backwards launch through it

    for mod in (ft, gluon_tiles, *(ft._gluon_modules(ft.GLUON_WS_TRITON) or ())):
        for name in ("launch", "launch_keyed"):
            if name in vars(mod):
                wrap(mod, name)
    try:
        yield
    finally:
        for owner, name, fn in reversed(wrapped):
            setattr(owner, name, fn)


def timeline(apply, leaves, iters: int) -> dict[str, float]:
    """Median us between consecutive stamps of ``iters`` synchronized calls of ``apply().sum().backward()``: from
    the call until the last kernel's launch, host time beyond the GPU's is the GPU's idle time."""

    def step():
        for t in leaves:
            t.grad = None
        stamp("start")
        o = apply()
        stamp("apply returned")
        s = o.sum()
        stamp("sum returned")
        s.backward()
        stamp("backward() returned")
        torch.cuda.synchronize()

    for _ in range(30):
        step()
    STAMPS.clear()
    for _ in range(iters):
        step()
    gaps: dict[str, list[float]] = {}
    for (a, ta), (b, tb) in zip(STAMPS, STAMPS[1:], strict=False):
        if b != "start":
            gaps.setdefault(f"{a} -> {b}", []).append((tb - ta) / 1e3)
    STAMPS.clear()
    return {k: round(statistics.median(v), 1) for k, v in gaps.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--d-head", type=int, default=64)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=0, help="K/V heads (grouped-query attention); 0: --heads")
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
    kv = args.kv_heads or h
    q = torch.randn(1, h, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(1, kv, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    q3, k3, v3 = q.detach().view(h, n, d), k.detach().view(kv, n, d), v.detach().view(kv, n, d)
    o3, lse = ft.forward_kernels(q3, k3, v3, True)
    do3 = torch.ones_like(o3)
    mode = ft.resolve_bwd_mode(q3, None)

    def full():
        ft.flash_attention_triton(q, k, v, True).sum().backward()

    def sdpa_full():
        sdpa = torch.nn.functional.scaled_dot_product_attention
        sdpa(q, k, v, is_causal=True, enable_gqa=kv != h).sum().backward()

    class NoKernelBackward(torch.autograd.Function):
        """Our forward and saved tensors, a backward that launches nothing: graph and engine cost."""

        @staticmethod
        def forward(ctx, q, k, v):
            o, lse = ft.forward_kernels(q.view(h, n, d), k.view(kv, n, d), v.view(kv, n, d), True)
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
                do.reshape(h, n, d), q.view(h, n, d), k.view(kv, n, d), v.view(kv, n, d), o, lse, True, mode
            )
            return dq.view(q.shape), dk.view(k.shape), dv.view(v.shape)

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
        "kv_heads": kv,
        "device": torch.cuda.get_device_name(),
        "impl": str(args.impl_file or "workloads/flash_triton.py"),
        "host_us": {},
    }
    print(f"seq {n}, d {d}, heads {h} (K/V {kv}), bf16 causal, {results['device']};", end=" ")
    print(f"host us per call (median of 3 x {args.iters}):")
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

    results["timeline_us"] = {}
    for single in (False, True):  # the autograd engine on its device thread (the default), then the calling one
        mode = "calling thread" if single else "device thread"
        with torch.autograd.set_multithreading_enabled(not single), stamped_launches(ft):
            gaps = timeline(lambda: ft.flash_attention_triton(q, k, v, True), (q, k, v), args.iters)
        results["timeline_us"][mode] = gaps
        print(f"timeline of full(), engine on its {mode}, median us between stamps:")
        for k_, v_ in gaps.items():
            print(f"  {k_:60s} {v_:8.1f}")
        print(f"  {'sum of medians':60s} {sum(gaps.values()):8.1f}")

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
