"""Run 8: one launch of each kernel variant under Nsight Compute (device machine, repo root).

    ncu --clock-control none -k regex:'_bwd_dkdv_kernel|_fwd_kernel' --section ... python3 benchmarks/results/attention/run8_ncu.py

Fixed configs, no autotuning, so each variant is exactly one profiled launch of each kernel named:
the forward (128x64, 8 warps, 3 stages) in launch order head after head and in groups of 4 heads,
and the dK/dV kernel (64x64, 4 warps, 3 stages, dQ by TMA reduce) as committed before run 8 and with
the Q/dO descriptor loads, dP-before-dV order and scaled dS.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from workloads.flash_triton import backward_kernels, forward_kernels  # noqa: E402

gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(16, 16384, 64, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
o, lse = forward_kernels(q, k, v, True, (128, 64, 8, 3), False, 1)
forward_kernels(q, k, v, True, (128, 64, 8, 3), False, 4)
backward_kernels(do, q, k, v, o, lse, True, "tma", (64, 64, 4, 3), None, {})
backward_kernels(
    do, q, k, v, o, lse, True, "tma", (64, 64, 4, 3), None, {"QDO_TMA": True, "SCALE_DS": True, "REORDER": True}
)
torch.cuda.synchronize()
print("ok")
