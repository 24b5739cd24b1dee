"""Run 15: the warp-specialized Gluon dK/dV kernel (workloads/flash_gluon_ws.py) on the GPU.

    python benchmarks/results/attention/run15_ws_check.py --check nc2      # exit 0: correct (one config a process,
                                                                           # so that a hang loses only that one)
    python benchmarks/results/attention/run15_ws_check.py --time nc2 nc1_2cta --out run15_time.jsonl

--check: against the ``tma`` backward on the same inputs (lengths 128-4096, causal and not, bf16 and fp16, and a
length that is no multiple of 128), dK/dV poisoned with NaN first, twice (a moving result is a race), and against
fp32 math attention next to the ``tma`` backward's own error. --time: backward at 1x16x16384x64 bf16 causal
(random dO; do_bench warmup 200 / rep 2000, median), SDPA (cuDNN), the default ``tma`` backward (autotuned as
committed) and each config, in one process, in two passes of opposite order.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from workloads import flash_gluon_ws as ws  # noqa: E402
from workloads.flash_triton import backward_kernels, forward_kernels  # noqa: E402

CASES = [  # (n, causal, dtype, heads)
    (128, True, torch.bfloat16, 2),
    (192, True, torch.bfloat16, 2),
    (1024, True, torch.bfloat16, 3),
    (1024, False, torch.float16, 2),
    (640, False, torch.bfloat16, 1),
    (4096, True, torch.bfloat16, 2),
    (4096, True, torch.bfloat16, 16),
]


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def check(name: str) -> int:
    config = ws.CONFIGS[name]
    worst = 0.0
    for n, causal, dtype, heads in CASES:
        gen = torch.Generator(device="cuda").manual_seed(n * 7 + causal + heads)
        q, k, v, do = (torch.randn(heads, n, 64, device="cuda", dtype=dtype, generator=gen) for _ in range(4))
        o, lse = forward_kernels(q, k, v, causal)
        want = backward_kernels(do, q, k, v, o, lse, causal, "tma")
        got = backward_kernels(do, q, k, v, o, lse, causal, "gluon_ws", config)
        again = backward_kernels(do, q, k, v, o, lse, causal, "gluon_ws", config)
        torch.cuda.synchronize()
        errs = [rel(g, w) for g, w in zip(got, want, strict=True)]
        moved = [rel(a, g) for a, g in zip(again, got, strict=True)]
        nan = any(not torch.isfinite(g).all() for g in got)
        worst = max(worst, *errs, *(m * 100 for m in moved), math.inf if nan else 0.0)
        print(f"{name} n {n} causal {causal} {str(dtype)[6:]} heads {heads}: vs tma dq {errs[0]:.1e} dk {errs[1]:.1e} "
              f"dv {errs[2]:.1e}; run to run {max(moved):.1e}; nonfinite {nan}", flush=True)  # fmt: skip
    # poisoned outputs through the kernel's own launcher, and fp32 math attention as the reference
    n, heads = 1024, 4
    gen = torch.Generator(device="cuda").manual_seed(99)
    q, k, v, do = (torch.randn(heads, n, 64, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    o, lse = forward_kernels(q, k, v, True)
    delta = (o.float() * do.float()).sum(-1).contiguous()
    dq = torch.zeros(heads, n, 64, device="cuda", dtype=torch.float32)
    dk, dv = torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))
    ws.dkdv(q, k, v, do, dq, lse, delta, dk, dv, 1 / 8, True, config)
    torch.cuda.synchronize()
    poisoned = not (torch.isfinite(dk).all() and torch.isfinite(dv).all() and torch.isfinite(dq).all())
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    s = qf @ kf.transpose(-1, -2) / 8
    s = s.masked_fill(torch.ones(n, n, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
    (torch.softmax(s, -1) @ vf).backward(do.float())
    ref = (qf.grad, kf.grad, vf.grad)
    tma_err = [rel(g, r) for g, r in zip(backward_kernels(do, q, k, v, o, lse, True, "tma"), ref, strict=True)]
    ws_err = [rel(g, r) for g, r in zip((dq, dk, dv), ref, strict=True)]
    print(f"{name} fp32 math reference n {n} causal: gluon_ws dq {ws_err[0]:.1e} dk {ws_err[1]:.1e} dv {ws_err[2]:.1e}"
          f" | tma dq {tma_err[0]:.1e} dk {tma_err[1]:.1e} dv {tma_err[2]:.1e}; unwritten (NaN) left {poisoned}")  # fmt: skip
    ok = worst < 1e-2 and not poisoned and max(ws_err) < 2 * max(tma_err) + 1e-3
    print(f"{name} worst {worst:.1e} -> {'OK' if ok else 'FAIL'}", flush=True)
    return 0 if ok else 1


def timing(names: list[str], out: Path) -> None:
    from triton.testing import do_bench

    n, heads = 16384, 16
    gen = torch.Generator(device="cuda").manual_seed(1234)
    q, k, v, do = (torch.randn(heads, n, 64, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    o, lse = forward_kernels(q, k, v, True)
    sq, sk, sv = (t.view(1, heads, n, 64).clone().requires_grad_() for t in (q, k, v))
    so = torch.nn.functional.scaled_dot_product_attention(sq, sk, sv, is_causal=True)
    sdo = do.view(1, heads, n, 64)
    want = backward_kernels(do, q, k, v, o, lse, True, "tma")  # also: the default's autotuning, before timing
    runs = {"sdpa": lambda: so.backward(sdo, retain_graph=True), "tma_default": lambda: backward_kernels(
        do, q, k, v, o, lse, True, "tma")}  # fmt: skip
    for name in names:  # a config name, optionally with @hgN: the launch order's head groups (default 4)
        config, _, hg = name.partition("@hg")
        opts = {"HEAD_GROUP": int(hg)} if hg else None
        got = backward_kernels(do, q, k, v, o, lse, True, "gluon_ws", ws.CONFIGS[config], None, opts)
        errs = [rel(g, w) for g, w in zip(got, want, strict=True)]
        print(f"{name} at the timed shape vs tma: dq {errs[0]:.1e} dk {errs[1]:.1e} dv {errs[2]:.1e}", flush=True)
        if max(errs) > 1e-2:
            continue
        runs[name] = lambda c=ws.CONFIGS[config], x=opts: backward_kernels(
            do, q, k, v, o, lse, True, "gluon_ws", c, None, x
        )
    times: dict[str, list[float]] = {key: [] for key in runs}
    order = list(runs)
    for rnd in range(2):
        for key in order if rnd == 0 else order[::-1]:
            ms = do_bench(runs[key], warmup=200, rep=2000, return_mode="median")
            times[key].append(ms)
            print(f"pass {rnd + 1} {key}: {ms:.3f} ms", flush=True)
    with out.open("a", encoding="utf-8") as f:
        for key, ms in times.items():
            row = {"what": "bwd", "variant": key, "config": ws.CONFIGS.get(key.partition("@hg")[0]), "ms": ms, "shape": [1, heads, n, 64],
                   "dtype": "bfloat16", "causal": True, "device": torch.cuda.get_device_name()}  # fmt: skip
            f.write(json.dumps(row) + "\n")
    print("\nbackward ms (two passes), 1x16x16384x64 bf16 causal:")
    for key, ms in times.items():
        print(f"  {key:14s} {ms[0]:.3f} / {ms[1]:.3f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check")
    p.add_argument("--time", nargs="*")
    p.add_argument("--out", default="run15_time.jsonl")
    args = p.parse_args()
    if args.check:
        return check(args.check)
    timing(args.time or [], Path(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
