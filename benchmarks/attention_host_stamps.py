"""Where the host time of a Triton FlashAttention forward + ``sum`` + backward goes, launch by launch (issue 26).

``perf_counter_ns`` stamps around each layer and each keyed launch (the forward, the D kernel, the d 128 dK/dV
kernel) of 300 synchronized calls (d 128, bf16, causal, 1x16 heads), median us between stamps, with the autograd
engine's device thread and on the calling thread. From the forward's launch to the dK/dV kernel's, the GPU has
only the forward kernel to run; host time beyond it there, and before the forward's launch, is the GPU's idle time.

    python benchmarks/attention_host_stamps.py 4096
"""

import statistics
import sys
import time

import torch
from profiler_kit.workloads import flash_gluon_bwd128 as gb
from profiler_kit.workloads import flash_gluon_fwd as gf
from profiler_kit.workloads import flash_triton as ft
from profiler_kit.workloads.attention import make_inputs

ST = []


def S(label):
    """Stamp ``label`` now ("name>": entering a function, "name<": leaving it)."""
    ST.append((label, time.perf_counter_ns()))


def wrap(mod, name, label):
    fn = getattr(mod, name)

    def w(*a, **kw):
        S(label + ">")
        out = fn(*a, **kw)
        S(label + "<")
        return out

    setattr(mod, name, w)


wrap(ft, "_gluon_ws", "gluon_ws")
wrap(ft, "launch_keyed", "delta_launch")
wrap(gb, "launch_keyed", "dkdv_launch")
wrap(gb, "dkdv", "dkdv")
wrap(ft, "backward_kernels", "backward_kernels")
wrap(ft, "forward_kernels", "forward_kernels")
wrap(gf, "launch_keyed", "fwd_launch")
ob = ft.FlashAttention2Triton.backward


def bwd(ctx, do):
    S("backward>")
    out = ob(ctx, do)
    S("backward<")
    return out


ft.FlashAttention2Triton.backward = staticmethod(bwd)
seq = int(sys.argv[1])
q, k, v = make_inputs(1, 16, seq, 128, torch.bfloat16, "cuda")


def step():
    q.grad = k.grad = v.grad = None
    S("start")
    o = ft.flash_attention_triton(q, k, v, True)
    S("apply<")
    s = o.sum()
    S("sum<")
    s.backward()
    S("end")
    torch.cuda.synchronize()


for single in (False, True):
    with torch.autograd.set_multithreading_enabled(not single):
        for _ in range(30):
            step()
        ST.clear()
        for _ in range(300):
            step()
    gaps = {}
    for (a, ta), (b, tb) in zip(ST, ST[1:], strict=False):
        if b != "start":
            gaps.setdefault(f"{a} -> {b}", []).append((tb - ta) / 1e3)
    print(f"seq {seq} engine {'calling thread' if single else 'device thread'}; median us:")
    tot = 0
    for k_, v_ in gaps.items():
        m = statistics.median(v_)
        tot += m
        print(f"  {k_:45s} {m:7.1f}")
    print(f"  {'sum of medians':45s} {tot:7.1f}")
    ST.clear()
