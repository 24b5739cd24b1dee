"""Screen Triton FlashAttention-2 variants against torch SDPA at the course leaderboard shape, in one process.

Shape: batch 1, 16 heads, seq 16384, d_head 64 (``--d-head``), bf16, causal. Every variant is
a fixed config (``BLOCK_M, BLOCK_N, num_warps, num_stages``) launched through
``workloads.flash_triton.forward_kernels`` / ``backward_kernels`` (no
autotuning), timed with ``triton.testing.do_bench`` (median, warmup 100 ms,
rep 500 ms) and checked against SDPA on the same inputs with a random upstream
gradient (relative error ||x - sdpa|| / ||sdpa|| of O, dQ, dK, dV). Timing of
the backward uses dO = ones, the gradient of ``o.sum()``.

The fastest correct forward and backward become an autotune list (the best
three configs of each) passed to ``workloads.attention_bench`` through
``FLASH_TRITON_CONFIGS``: the leaderboard run (warmup 200 ms, rep 2000 ms,
Triton and SDPA side by side) and the fp32-reference checks at seq 777 and
4096 then run on exactly the code path the defaults get.

Example (device machine, repo root)::

    python benchmarks/attention_variants.py --out-dir $OUT --budget-s 95
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

FWD = [(128, 64, 4, 3), (128, 64, 8, 3), (128, 64, 8, 4), (128, 128, 8, 3), (128, 64, 4, 4), (128, 32, 4, 4)]
FWD_TMA = [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 4)]
DKDV = [(32, 128, 4, 4), (32, 128, 4, 5), (64, 128, 8, 3), (64, 128, 4, 3), (64, 64, 4, 3), (128, 128, 8, 2)]
DQ = [(128, 32, 4, 4), (128, 64, 8, 3), (128, 64, 4, 3), (64, 64, 4, 3)]
TMA_DKDV = [(64, 128, 8, 3), (64, 128, 8, 2), (32, 128, 4, 4), (32, 128, 4, 5), (64, 128, 4, 3), (128, 128, 8, 2),
            (64, 64, 4, 3)]  # fmt: skip
ATOMIC_DKDV = [(64, 128, 8, 3)]
# run 5: around run 4's winners (64x64 dK/dV tiles with the TMA dQ reduce; 128x64 forward), stages and warps
GRIDS = {
    "run4": {"fwd": FWD, "fwd_tma": FWD_TMA, "dkdv": DKDV, "dq": DQ, "tma_dkdv": TMA_DKDV, "atomic": ATOMIC_DKDV},
    "run5": {
        "fwd": [(128, 64, 8, 3), (128, 64, 8, 2), (128, 64, 4, 3), (128, 64, 4, 2), (128, 128, 8, 2), (64, 64, 4, 4),
                (64, 32, 4, 4), (128, 32, 8, 4)],
        "fwd_tma": [],
        "dkdv": [(32, 128, 4, 3), (64, 64, 4, 4)],
        "dq": [(128, 32, 4, 3), (64, 64, 4, 4), (128, 64, 4, 3), (64, 32, 4, 3)],
        "tma_dkdv": [(64, 64, 4, 3), (64, 64, 4, 2), (64, 64, 4, 4), (64, 64, 4, 5), (64, 64, 8, 3), (32, 64, 4, 3),
                     (32, 64, 4, 4), (32, 32, 4, 3), (64, 128, 8, 3), (32, 128, 4, 3)],
        "atomic": [(64, 64, 4, 3)],
    },
    # run 7: register caps (maxnreg, 5th element) on run 4/5's winners: more programs resident per SM?
    "run7": {
        "fwd": [(128, 64, 8, 3), (128, 64, 8, 3, 96), (128, 64, 8, 3, 112), (128, 64, 4, 3, 168),
                (128, 64, 4, 3, 192), (128, 64, 8, 4, 112)],
        "fwd_tma": [],
        "dkdv": [],
        "dq": [(128, 64, 4, 3)],
        "tma_dkdv": [(64, 64, 4, 3), (64, 64, 4, 3, 128), (64, 64, 4, 3, 160), (64, 64, 4, 3, 168),
                     (64, 64, 4, 3, 192), (64, 64, 4, 4, 168), (64, 64, 4, 4, 192), (64, 64, 4, 3, 232)],
        "atomic": [],
    },
    # run 8: structure of the dK/dV kernel (BWD_OPTS switches, "bwd_opts": mode, config, switches) and the
    # forward's launch order ("fwd_grouped": config, HEAD_GROUP); "diag": the dK/dV kernel alone (no dQ at all), to see
    # what the dQ product and its reduce cost
    "run8": {
        "fwd": [(128, 64, 8, 3), (128, 64, 8, 4, 112)],
        "fwd_grouped": [((128, 64, 8, 3), 2), ((128, 64, 8, 3), 4), ((128, 64, 8, 3), 16),
                        ((128, 64, 8, 4, 112), 4), ((128, 64, 8, 4), 4)],
        "fwd_tma": [],
        "dkdv": [],
        "dq": [(128, 64, 4, 3)],
        "tma_dkdv": [(64, 64, 4, 3)],
        "atomic": [],
        "bwd_opts": [
            ("tma", (64, 64, 4, 3), {"HEAD_GROUP": 4}),
            ("tma", (64, 64, 4, 3), {"REORDER": True}),
            ("tma", (64, 64, 4, 3), {"SCALE_DS": True}),
            ("tma", (64, 64, 4, 3), {"QDO_TMA": True}),
            ("tma", (64, 64, 4, 3), {"QDO_TMA": True, "SCALE_DS": True, "REORDER": True}),
            ("tma", (64, 64, 4, 3), {"QDO_TMA": True, "SCALE_DS": True, "REORDER": True, "HEAD_GROUP": 4}),
            ("tma", (64, 64, 4, 4), {"QDO_TMA": True, "SCALE_DS": True, "REORDER": True}),
            ("tma", (64, 64, 4, 2), {"QDO_TMA": True, "SCALE_DS": True, "REORDER": True}),
            ("tma", (64, 64, 4, 2, 168), {}),
            ("tma", (64, 64, 4, 2, 168), {"QDO_TMA": True, "SCALE_DS": True}),
            ("tma", (64, 64, 4, 2, 168), {"QDO_TMA": True, "SCALE_DS": True, "REORDER": True}),
            ("tma", (64, 128, 8, 3), {"QDO_TMA": True, "SCALE_DS": True, "REORDER": True}),
            ("two_kernel", (64, 64, 4, 3), {"QDO_TMA": True, "SCALE_DS": True, "REORDER": True}),
        ],
        "diag": [((64, 64, 4, 3), {}), ((64, 64, 4, 3), {"QDO_TMA": True, "SCALE_DS": True, "REORDER": True})],
    },
    # run 8, second call: load order of L/D as before run 8 (fixes the base), queries-as-rows dS ("ROWS"),
    # 3 programs per SM (2 stages, maxnreg 168), forward launch order again. The ROWS and DQ_FIRST rows of
    # run 8 are gone with those switches (both lost); they ran at commit 7fa6ddf.
    "run8b": {
        "fwd": [(128, 64, 8, 3)],
        "fwd_tma": [],
        "fwd_grouped": [((128, 64, 8, 3), 2), ((128, 64, 8, 3), 4), ((128, 64, 8, 4, 112), 2)],
        "dkdv": [],
        "dq": [(128, 64, 4, 3)],
        "tma_dkdv": [(64, 64, 4, 3)],
        "atomic": [],
        "bwd_opts": [
            ("tma", (64, 64, 4, 3), {"QDO_TMA": True, "SCALE_DS": True, "REORDER": True}),
            ("tma", (64, 64, 4, 3), {"QDO_TMA": True, "SCALE_DS": True, "REORDER": True, "HEAD_GROUP": 4}),
            ("tma", (64, 64, 4, 4), {"QDO_TMA": True, "SCALE_DS": True, "REORDER": True}),
            ("tma", (64, 64, 4, 2, 168), {"QDO_TMA": True, "SCALE_DS": True}),
            ("tma", (64, 64, 4, 3), {"QDO_TMA": True, "SCALE_DS": True}),
            ("tma", (64, 64, 4, 3), {"QDO_TMA": True, "SCALE_DS": True, "REORDER": True}),
        ],
    },
    # run 8, third call, defaults now QDO_TMA+REORDER+SCALE_DS, HEAD_GROUP 4 (bwd) and 2 (fwd): dQ product
    # first (DQ_FIRST; dV and dK then run on into the next tile), 3 programs per SM, the default twice
    "run8c": {
        "fwd": [(128, 64, 8, 3)],
        "fwd_tma": [],
        "fwd_grouped": [((128, 64, 8, 3), 2), ((128, 64, 8, 4, 112), 2)],
        "dkdv": [],
        "dq": [(128, 64, 4, 3)],
        "tma_dkdv": [(64, 64, 4, 3)],
        "atomic": [],
        "bwd_opts": [
            ("tma", (64, 64, 4, 2, 168), {"REORDER": False}),
            ("tma", (64, 64, 4, 3), {"HEAD_GROUP": 1}),
            ("tma", (64, 64, 4, 3), {}),
        ],
    },
    # d 128: twice the registers per row of Q, K, V and the accumulators; never screened before run 6
    "d128": {
        "fwd": [(128, 64, 8, 3), (128, 64, 8, 2), (128, 128, 8, 2), (64, 64, 4, 3), (128, 32, 8, 3), (64, 32, 4, 3),
                (128, 64, 4, 3), (64, 64, 4, 2)],
        "fwd_tma": [(128, 64, 8, 3)],
        "dkdv": [(64, 64, 4, 2), (32, 64, 4, 3)],
        "dq": [(128, 32, 4, 3), (64, 64, 4, 3), (128, 64, 8, 2), (64, 32, 4, 3)],
        "tma_dkdv": [(64, 64, 4, 3), (64, 64, 4, 2), (64, 64, 8, 3), (64, 64, 8, 2), (32, 64, 4, 3), (32, 64, 4, 2),
                     (64, 128, 8, 2), (32, 128, 4, 2), (32, 32, 4, 3), (64, 128, 8, 3)],
        "atomic": [(64, 64, 8, 2)],
    },
    # run 12: the run-8 switches one by one at d 128 (all together they spill there), on the d-128 winner's tiles
    "run12": {
        "fwd": [(128, 64, 8, 3)],
        "fwd_tma": [],
        "fwd_grouped": [((128, 64, 8, 3), 2), ((128, 64, 8, 3), 4)],
        "dkdv": [],
        "dq": [(128, 64, 4, 3)],
        "tma_dkdv": [],
        "atomic": [],
        "bwd_opts": [
            ("tma", cfg, {"HEAD_GROUP": hg, "QDO_TMA": qdo, "REORDER": False, "SCALE_DS": sds})
            for cfg in ((64, 128, 8, 3), (64, 128, 8, 2))
            for hg, qdo, sds in ((1, False, False), (4, False, False), (1, True, False), (1, False, True),
                                 (4, True, False), (4, True, True))
        ],
    },
    # runs 13 and 13b (DQ_LAG, S_LAG, DQ_T: all lost, results/attention/README.md) ran their grids at commits e5a6b6a
    # and b514e3d, with those switches in workloads/flash_triton.py
    # run 14 (the dK/dV kernel in Gluon, mode "gluon": as fast as the default, removed) ran its grids at commit f4ca10a
}  # fmt: skip
FALLBACK = [64, 64, 4, 3]  # small tiles that compile for every head dim: last in each autotune list
TOL = 1e-2
DKDV_REGS = "_flash_bwd_dkdv_kernel_regs_spills"  # regs() key of the dK/dV kernel (named after the kernel)


def dkdv_alone(q, k, v, do, o, lse, config, opts):
    """The dK/dV kernel of ``backward_kernels`` without any dQ work (``DQ_MODE`` 0), for timing only."""
    import triton
    from profiler_kit.workloads import flash_triton as ft
    from profiler_kit.workloads.triton_launch import launch
    from triton.tools.tensor_descriptor import TensorDescriptor

    bh, n, d = q.shape
    delta = torch.zeros((bh, n), dtype=torch.float32, device=q.device)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    q_desc, do_desc = q, do
    if opts["QDO_TMA"]:
        q_desc = TensorDescriptor(q, [bh * n, d], [d, 1], [config[0], d])
        do_desc = TensorDescriptor(do, [bh * n, d], [d, 1], [config[0], d])
    grid = (triton.cdiv(n, config[1]) * bh,)
    args = (q, k, v, do, q_desc, do_desc, dk, dv, dk, dk, lse, delta, 1.0 / d**0.5, n)
    launch(ft._flash_bwd_dkdv_kernel, grid, args, {"HEAD_DIM": d, "IS_CAUSAL": True, "DQ_MODE": 0, **opts}, config)
    return dk, dv


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", default=".")
    p.add_argument("--budget-s", type=float, default=150.0, help="screening stops starting variants after this")
    p.add_argument("--seq", type=int, default=16384)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--no-final", action="store_true", help="screen only")
    p.add_argument("--device", default="cuda", help="cpu: dry run of this script under TRITON_INTERPRET=1")
    p.add_argument("--d-head", type=int, default=64)
    p.add_argument("--grid", default="run4", choices=sorted(GRIDS), help="which config lists to screen")
    p.add_argument("--tag", default="run4", help="prefix of the output files (<tag>_variants.jsonl, ...)")
    args = p.parse_args(argv)
    dev = args.device
    grid = GRIDS[args.grid]

    if dev == "cuda":
        from triton.testing import do_bench
    else:

        def do_bench(fn, warmup, rep, return_mode):
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3

    from profiler_kit.workloads import flash_triton
    from profiler_kit.workloads.flash_triton import backward_kernels, forward_kernels
    from profiler_kit.workloads.triton_launch import LAST_COMPILED

    def regs() -> dict:
        """Registers and spills of the kernels the last fixed-config launch compiled (compiler's figures)."""
        out = {f"{k}_regs_spills": list(v) for k, v in LAST_COMPILED.items()}
        LAST_COMPILED.clear()
        return out

    out_dir = Path(args.out_dir)
    sink = open(out_dir / f"{args.tag}_variants.jsonl", "a", encoding="utf-8")  # noqa: SIM115
    t0 = time.perf_counter()
    rows: list[dict] = []

    def emit(row: dict) -> None:
        row["t_s"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        sink.write(json.dumps(row) + "\n")
        sink.flush()
        print(json.dumps(row), file=sys.stderr, flush=True)

    def bench(fn, warmup=100, rep=500) -> float:
        return do_bench(fn, warmup=warmup, rep=rep, return_mode="median")

    n, heads, d = args.seq, 16, args.d_head
    gen = torch.Generator(device=dev).manual_seed(1234)
    q4, k4, v4 = (
        torch.randn(1, heads, n, d, device=dev, dtype=getattr(torch, args.dtype), generator=gen) for _ in range(3)
    )
    q, k, v = (t.view(heads, n, d) for t in (q4, k4, v4))
    do_rand = torch.randn(heads, n, d, device=dev, dtype=getattr(torch, args.dtype), generator=gen)
    ones = torch.ones(heads, n, d, device=dev, dtype=getattr(torch, args.dtype))
    emit({"what": "env", "device": torch.cuda.get_device_name() if dev == "cuda" else dev, "torch": torch.__version__,
          "triton": __import__("triton").__version__, "shape": [1, heads, n, d], "dtype": args.dtype, "causal": True})  # fmt: skip

    # SDPA: reference values and timings (same convention as attention_bench: backward of an existing output)
    sq, sk, sv = (t.clone().requires_grad_() for t in (q4, k4, v4))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    ref_o = sdpa(sq, sk, sv, is_causal=True)
    ref_o.backward(do_rand.view(1, heads, n, d))
    ref = {"o": ref_o.detach().view(heads, n, d)} | {
        f"d{c}": t.grad.view(heads, n, d) for c, t in zip("qkv", (sq, sk, sv), strict=True)
    }
    for t in (sq, sk, sv):
        t.grad = None
    fwd_ms = bench(lambda: sdpa(sq, sk, sv, is_causal=True))
    out = sdpa(sq, sk, sv, is_causal=True)
    g1 = torch.ones_like(out)
    bwd_ms = bench(lambda: out.backward(g1, retain_graph=True))
    out = None
    both_ms = bench(lambda: sdpa(sq, sk, sv, is_causal=True).sum().backward())
    emit({"what": "sdpa", "fwd_ms": fwd_ms, "bwd_ms": bwd_ms, "fwd_bwd_ms": both_ms})
    for t in (sq, sk, sv):
        t.grad = None

    def over_budget() -> bool:
        return time.perf_counter() - t0 > args.budget_s

    # backward variants: (mode, dkdv config, dq config, BWD_OPTS overrides)
    o, lse = forward_kernels(q, k, v, True, grid["fwd"][0], False)
    regs()  # forget the forward's figures: bwd rows list the backward kernels only

    def bwd_variants():
        for cfg in grid["tma_dkdv"]:
            yield "tma", cfg, None, {}
        for cfg in grid["dkdv"]:
            yield "two_kernel", cfg, grid["dq"][0], {}
        yield "best_dkdv", None, None, {}  # marker: dq configs with the best two-kernel dK/dV config
        for cfg in grid["atomic"]:
            yield "atomic", cfg, None, {}
        for mode, cfg, opts in grid.get("bwd_opts", []):
            yield mode, cfg, grid["dq"][0] if mode == "two_kernel" else None, opts

    best_dkdv = grid["dkdv"][0] if grid["dkdv"] else None
    for mode, c1, c2, opts in bwd_variants():
        if mode == "best_dkdv":
            two = [r for r in rows if r.get("what") == "bwd" and r["mode"] == "two_kernel" and r.get("status") == "ok"]
            best_dkdv = tuple(min(two, key=lambda r: r["ms"])["dkdv"]) if two else best_dkdv
            todo = [("two_kernel", best_dkdv, c) for c in grid["dq"][1:]] if best_dkdv else []
        else:
            todo = [(mode, c1, c2)]
        for mode_, cfg1, cfg2 in todo:
            row = {"what": "bwd", "mode": mode_, "dkdv": list(cfg1), "dq": list(cfg2) if cfg2 else None,
                   "opts": {**flash_triton.BWD_OPTS, **opts}}  # fmt: skip
            if over_budget():
                emit(row | {"status": "skipped"})
                continue
            try:
                regs()  # forget earlier variants' kernels
                grads = backward_kernels(do_rand, q, k, v, o, lse, True, mode_, cfg1, cfg2, opts)
                row |= regs()
                for name, got in zip(("dq", "dk", "dv"), grads, strict=True):
                    row[f"rel_err_{name}"] = _rel(got, ref[name])
                row["ms"] = bench(
                    lambda m=mode_, a=cfg1, b=cfg2, x=opts: backward_kernels(ones, q, k, v, o, lse, True, m, a, b, x)
                )
                worst = max(row[f"rel_err_{c}"] for c in ("dq", "dk", "dv"))
                row["status"] = "ok" if worst < TOL else "wrong"
            except Exception as err:
                row.update(status="error", error=f"{type(err).__name__}: {str(err)[:200]}")
            emit(row)

    # the dK/dV kernel alone, no dQ (diagnostic: what the dQ product and its reduce cost)
    for cfg, opts in grid.get("diag", []):
        row = {"what": "diag_dkdv_alone", "dkdv": list(cfg), "opts": {**flash_triton.BWD_OPTS, **opts}}
        try:
            row["ms"] = bench(lambda c=cfg, x=row["opts"]: dkdv_alone(q, k, v, ones, o, lse, c, x))
            row |= regs()
        except Exception as err:
            row.update(status="error", error=f"{type(err).__name__}: {str(err)[:200]}")
        emit(row)

    # forward variants
    fwd_variants = [(False, c, 1) for c in grid["fwd"]] + [(True, c, 1) for c in grid["fwd_tma"]]
    fwd_variants += [(False, c, g) for c, g in grid.get("fwd_grouped", [])]
    for tma, cfg, hg in fwd_variants:
        row = {"what": "fwd", "tma": tma, "head_group": hg, "config": list(cfg)}
        if over_budget():
            emit(row | {"status": "skipped"})
            continue
        try:
            o, lse = forward_kernels(q, k, v, True, cfg, tma, hg)
            row |= regs()
            row["rel_err_o"] = _rel(o, ref["o"])
            row["ms"] = bench(lambda c=cfg, t=tma, h=hg: forward_kernels(q, k, v, True, c, t, h))
            row["status"] = "ok" if row["rel_err_o"] < TOL else "wrong"
        except Exception as err:  # a config that does not compile or fit is a result
            row.update(status="error", error=f"{type(err).__name__}: {str(err)[:200]}")
        emit(row)
    ok_fwd = sorted((r for r in rows if r.get("what") == "fwd" and r.get("status") == "ok"), key=lambda r: r["ms"])
    best_fwd = ok_fwd[0] if ok_fwd else {"tma": False, "head_group": 1, "config": None}

    ok_bwd = sorted((r for r in rows if r.get("what") == "bwd" and r.get("status") == "ok"), key=lambda r: r["ms"])
    print("\nscreening (ms, median of do_bench 100/500):", file=sys.stderr)
    print(f"  sdpa fwd {fwd_ms:.3f} bwd {bwd_ms:.3f} fwd+bwd {both_ms:.3f}", file=sys.stderr)
    for r in ok_fwd[:5]:
        print(f"  fwd tma={r['tma']} head_group={r.get('head_group', 1)} {r['config']} {r['ms']:.3f} "
              f"err {r['rel_err_o']:.1e}", file=sys.stderr)  # fmt: skip
    for r in ok_bwd[:16]:
        on = [k if x is True else f"{k}={x}" for k, x in r.get("opts", {}).items() if x is True or x not in (False, 1)]
        on = "+".join(on) or "-"
        print(f"  bwd {r['mode']} {on} dkdv {r['dkdv']} dq {r['dq']} {r['ms']:.3f} "
              f"err dq {r['rel_err_dq']:.1e} regs {r.get(DKDV_REGS)}", file=sys.stderr)  # fmt: skip
    for r in rows:
        if r.get("what") == "diag_dkdv_alone":
            print(f"  dK/dV kernel alone {r['dkdv']} {r['opts']} {r.get('ms', float('nan')):.3f}", file=sys.stderr)
    if args.no_final or not ok_fwd or not ok_bwd:
        return 0

    # final: top-3 autotune lists on the default code path, through the benchmark CLI
    mode, opts = ok_bwd[0]["mode"], ok_bwd[0].get("opts", {})
    same_mode = [r for r in ok_bwd if r["mode"] == mode and r.get("opts", {}) == opts]
    dkdv = []
    for r in same_mode:
        if r["dkdv"] not in dkdv:
            dkdv.append(r["dkdv"])
    chosen = {
        "fwd": [
            r["config"]
            for r in ok_fwd
            if (r["tma"], r.get("head_group", 1)) == (best_fwd["tma"], best_fwd.get("head_group", 1))
        ][:3],
        "fwd_tma": best_fwd["tma"],
        "fwd_head_group": best_fwd.get("head_group", 1),
        "bwd": mode,
        "bwd_opts": opts,
        "dkdv": dkdv[:3],
    }
    if mode == "two_kernel":
        dq = []
        for r in same_mode:
            if r["dq"] not in dq:
                dq.append(r["dq"])
        chosen["dq"] = dq[:3]
    for key in ("fwd", "dkdv", "dq"):
        if key in chosen and FALLBACK not in chosen[key]:
            chosen[key].append(FALLBACK)
    emit({"what": "chosen", **chosen})
    env = {**os.environ, "FLASH_TRITON_CONFIGS": json.dumps(chosen), "TRITON_PRINT_AUTOTUNING": "1"}
    bench_cmd = [sys.executable, "-m", "profiler_kit.workloads.attention_bench"]
    lead = ["--impl", "triton", "sdpa", "--d-head", str(d), "--seq", str(n), "--causal", "--warmup", "200",
            "--rep", "2000", "--out", str(out_dir / f"{args.tag}_lead.jsonl")]  # fmt: skip
    checks = [
        ["--check", "--impl", "triton", "--d-head", str(d), "--seq", "777", "4096", "--causal",
         "--out", str(out_dir / f"{args.tag}_check.jsonl")],
        ["--check", "--impl", "triton", "--d-head", str(d), "--seq", "777", "--out", str(out_dir / f"{args.tag}_check.jsonl")],
    ]  # fmt: skip
    for extra in [lead, *checks] if dev == "cuda" else []:
        print("$ FLASH_TRITON_CONFIGS='" + env["FLASH_TRITON_CONFIGS"] + "' python -m profiler_kit.workloads.attention_bench "
              + " ".join(extra), file=sys.stderr, flush=True)  # fmt: skip
        subprocess.run(bench_cmd + extra, env=env, check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
