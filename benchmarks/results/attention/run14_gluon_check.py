"""Run 14: the Gluon dK/dV kernel against the tma-mode Triton backward on the same inputs (GPU only).

Needs the code at commit f4ca10a (workloads/flash_gluon.py and mode "gluon" were removed after run 14).

python benchmarks/results/attention/run14_gluon_check.py   # one line per case: max relative error of dQ, dK, dV
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from workloads.flash_triton import backward_kernels, forward_kernels  # noqa: E402

# (BLOCK_M, BLOCK_N, warps, stages, maxnreg, parts, S and dP together): flash_gluon.dkdv's config
CONFIGS = [
    (64, 64, 4, 3, 0, 1, True),
    (64, 64, 4, 2, 0, 2, True),
    (64, 128, 8, 2, 0, 1, True),
    (64, 128, 8, 2, 0, 2, True),
]


def main() -> int:
    worst = 0.0
    for n, causal, dtype, heads in [(128, True, torch.bfloat16, 2), (1024, True, torch.bfloat16, 3),
                                    (1024, False, torch.float16, 2), (4096, True, torch.bfloat16, 16)]:  # fmt: skip
        gen = torch.Generator(device="cuda").manual_seed(n + causal)
        q, k, v, do = (torch.randn(heads, n, 64, device="cuda", dtype=dtype, generator=gen) for _ in range(4))
        o, lse = forward_kernels(q, k, v, causal)
        want = backward_kernels(do, q, k, v, o, lse, causal, "tma")
        for config in CONFIGS:
            got = backward_kernels(do, q, k, v, o, lse, causal, "gluon", config)
            torch.cuda.synchronize()
            errs = [((g.float() - w.float()).norm() / w.float().norm()).item() for g, w in zip(got, want, strict=True)]
            worst = max(worst, *errs)
            print(f"n {n} causal {causal} {dtype} heads {heads} config {config}: rel err dq {errs[0]:.1e} "
                  f"dk {errs[1]:.1e} dv {errs[2]:.1e}", flush=True)  # fmt: skip
    print("worst", worst)
    return 0 if worst < 1e-2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
