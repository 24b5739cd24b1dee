"""Run 11 check (GPU): launches through cached compiled kernels give what Triton's own launches gave.

Each case runs forward + ``o.sum()`` backward twice: the first call of a launch key goes through
Triton (tuning, compiling, caching the plan), the second through ``_launch``'s cached plan. Both are
compared with each other (forward, dK, dV bitwise; dQ's fp32 sums may add in another order) and
with float64 math attention. Cases vary dtype, head dim, causality, ragged lengths, a
16-byte-misaligned input and the upstream gradient's strides. One JSON line per case.

    python benchmarks/results/attention/run11_fastpath_check.py --out run11_fastpath.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from workloads import flash_triton as ft  # noqa: E402

CASES = [  # batch, heads, seq, d, dtype, causal, misaligned
    (1, 16, 1024, 64, torch.bfloat16, True, False),
    (2, 8, 777, 64, torch.bfloat16, True, False),
    (1, 4, 777, 128, torch.bfloat16, False, False),
    (1, 4, 1000, 32, torch.float16, True, False),
    (1, 4, 513, 64, torch.float32, True, False),
    (1, 4, 640, 64, torch.bfloat16, True, True),
    (1, 16, 4096, 64, torch.bfloat16, True, False),
]


def inputs(b, h, n, d, dtype, misaligned, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    numel = b * h * n * d
    out = []
    for _ in range(3):
        flat = torch.randn(numel + 1, generator=gen, device="cuda").to(dtype)
        t = (flat[1:] if misaligned else flat[:numel]).view(b, h, n, d)  # [1:]: 2 or 4 bytes off 16-byte alignment
        out.append(t.detach().requires_grad_())
    return out


def reference(q, k, v, causal, do):
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    s = q64 @ k64.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), -math.inf)
    o = torch.softmax(s, -1) @ v64
    o.backward(do.double())
    return {"o": o.detach(), "dq": q64.grad, "dk": k64.grad, "dv": v64.grad}


def rel(a, b):
    return float((a.double() - b).norm() / b.norm())


def run(q, k, v, causal, do):
    for t in (q, k, v):
        t.grad = None
    o = ft.FlashAttention2Triton.apply(q, k, v, causal)
    (o.sum() if do is None else o).backward(None if do is None else do)
    return {"o": o.detach().clone(), "dq": q.grad.clone(), "dk": k.grad.clone(), "dv": v.grad.clone()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    failed = 0
    with args.out.open("a") as f:
        for i, (b, h, n, d, dtype, causal, misaligned) in enumerate(CASES):
            q, k, v = inputs(b, h, n, d, dtype, misaligned, i)
            for grad in ("sum", "random", "transposed"):
                if grad == "sum":
                    do = None
                elif grad == "random":
                    do = torch.randn(q.shape, device="cuda").to(dtype)
                else:
                    do = torch.randn(b, h, d, n, device="cuda").to(dtype).transpose(-1, -2)
                plans_before = len(ft._PLANS)
                first = run(q, k, v, causal, do)
                plans_after = len(ft._PLANS)
                second = run(q, k, v, causal, do)
                ref = reference(q, k, v, causal, torch.ones_like(q) if do is None else do)
                row = {
                    "case": [b, h, n, d, str(dtype).removeprefix("torch."), causal, misaligned],
                    "grad": grad,
                    "new_plans": plans_after - plans_before,
                    "same_o": bool(torch.equal(first["o"], second["o"])),
                    "same_dk_dv": bool(
                        torch.equal(first["dk"], second["dk"]) and torch.equal(first["dv"], second["dv"])
                    ),
                    "dq_first_vs_second": rel(second["dq"], first["dq"].double()),
                    "rel_err": {name: rel(second[name], ref[name]) for name in ("o", "dq", "dk", "dv")},
                    "rel_err_first": {name: rel(first[name], ref[name]) for name in ("o", "dq", "dk", "dv")},
                }
                ok = row["same_o"] and max(row["rel_err"].values()) < 1e-2
                failed += not ok
                row["ok"] = ok
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")
    print(f"{failed} case(s) failed; plans cached: {len(ft._PLANS)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
