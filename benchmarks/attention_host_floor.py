"""How far the Triton FlashAttention's host path is from the cheapest Python autograd Function (issue 26).

``floor`` is a ``torch.autograd.Function`` whose forward and backward only allocate what ours does and replay the
launches a call of ours recorded (``triton_launch.launch_keyed`` entries: the forward, the D kernel, the d 128
dK/dV kernel), so it costs what any Python Function around these kernels must. It is timed against ours and SDPA
(d 128, bf16, causal, 1x16 heads), forward + ``sum`` + backward, a synchronized call at a time after an L2 flush,
with the autograd engine's device thread (``multi``) and on the calling thread (``single``), median ms of 100
calls in 3 rounds. Its output is not checked: the replays write to the recorded call's addresses.

    python benchmarks/attention_host_floor.py 4096
"""

import sys

import torch
from profiler_kit.workloads import flash_gluon_fwd as gf
from profiler_kit.workloads import flash_triton as ft
from profiler_kit.workloads import gluon_tiles
from profiler_kit.workloads import triton_launch as tl
from profiler_kit.workloads.attention import get_impl, make_inputs

SEQ = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
rec = []
orig = tl.launch_keyed


def recording(key, kernel, build):
    orig(key, kernel, build)
    rec.append(tl._KEYED.get(key))


for m in (ft, gf, gluon_tiles):  # the modules whose launches a d 128 call makes
    m.launch_keyed = recording
q, k, v = make_inputs(1, 16, SEQ, 128, torch.bfloat16, "cuda")
for _ in range(3):
    q.grad = k.grad = v.grad = None
    rec.clear()
    ft.flash_attention_triton(q, k, v, True).sum().backward()
fwd_e, delta_e, dkdv_e = rec  # the forward, D and dK/dV launches of the last call: (direct call, grid, arguments)
for m in (ft, gf, gluon_tiles):  # the modules whose launches a d 128 call makes
    m.launch_keyed = orig
lshape = q.shape[:-1]


class Floor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, is_causal):
        o = torch.empty_like(q)
        lse = torch.empty(lshape, dtype=torch.float32, device=q.device)
        fwd_e[0](fwd_e[1], None, fwd_e[2])
        ctx.save_for_backward(lse, q, k, v, o)
        return o

    @staticmethod
    def backward(ctx, do):
        lse, q, k, v, o = ctx.saved_tensors
        dq = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        torch.empty(lshape, dtype=torch.float32, device=q.device)  # delta, as ours allocates it
        delta_e[0](delta_e[1], None, delta_e[2])
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        dkdv_e[0](dkdv_e[1], None, dkdv_e[2])
        return dq.to(q.dtype), dk, dv, None


cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int, device="cuda")
fns = {"triton": get_impl("triton"), "floor": Floor.apply, "sdpa": get_impl("sdpa")}


def run(f, n, single):
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    with torch.autograd.set_multithreading_enabled(not single):
        for _ in range(n):
            q.grad = k.grad = v.grad = None
            cache.zero_()
            st.record()
            f(q, k, v, True).sum().backward()
            en.record()
            torch.cuda.synchronize()
            ts.append(st.elapsed_time(en))
    ts.sort()
    return ts[len(ts) // 2]


for f in fns.values():
    run(f, 30, False)
res = {}
for _rnd in range(3):
    for single in (False, True):
        for name, f in fns.items():
            res.setdefault((name, single), []).append(run(f, 100, single))
for (name, single), v in res.items():
    print(f"  seq {SEQ} {name:6s} {'single' if single else 'multi '} ms {' '.join(f'{x:.3f}' for x in v)}")
