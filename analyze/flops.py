"""Analytic FLOPs and bytes of the CS336 Transformer LM, and achieved rates against measured ceilings.

FLOPs come from the model's shapes alone (the CS336 assignment 2 architecture of workloads/models.py), so a
report can divide them by kernel time from a trace or wall time from the
harness. Only matrix products are counted (2*m*n*k each): norms, RoPE, softmax,
masking, the loss and the optimizer are elementwise work whose cost is memory
traffic, not FLOPs.

Per forward pass, with B batch, N context, d d_model, f d_ff, L layers,
H heads, dh = d / H, V vocab and T = B*N tokens:

- GEMM (linear layers): ``L * (4 * 2*T*d*d  +  3 * 2*T*d*f)  +  2*T*d*V``
  (q/k/v/o projections, SwiGLU w1/w2/w3, lm_head);
- attention matmuls: ``L * 2 * (2*B*H*N*N*dh)`` (QK^T and PV), over the full
  N x N score matrix: the reference model materializes it and masks, it does
  not skip the masked half.

Backward is exactly 2x forward for both: every product's two inputs need a
gradient (activations, including the embedding output, and weights).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profiler_kit.analyze.projection import attribute

# Hand-written AdamW of workloads.models, per parameter element, one kernel per op:
# p*=(1-lr*wd) 2, m*=b1 2, m+=(1-b1)g 3, v*=b2 2, v+=(1-b2)g*g 4 (g read twice),
# s=sqrt(v) 2, s/=c 2, s+=eps 2, p+=-a*m/s 4  -> 23 operand reads/writes.
ADAMW_KERNELS_PER_TENSOR = 9
ADAMW_ACCESSES_PER_ELEMENT = 23


def model_shape(model: dict) -> tuple[int, int, int, int, int, int, int, int]:
    """(B, N, d, f, L, H, dh, V) from a run.json ``model`` dict (keys batch, ctx, d_model, d_ff, layers, heads, vocab)."""
    d, h = int(model["d_model"]), int(model["heads"])
    dh = int(model.get("d_head") or d // h)
    return (
        int(model["batch"]),
        int(model["ctx"]),
        d,
        int(model["d_ff"]),
        int(model["layers"]),
        h,
        dh,
        int(model["vocab"]),
    )


def forward_flops(model: dict) -> dict[str, int]:
    """FLOPs of one forward pass, split by kind (formula in the module docstring).

    Args:
        model: shapes as run.json's ``model`` (vocab, d_model, d_ff, layers, heads, d_head, batch, ctx).

    Returns:
        ``gemm`` (linear layers), ``attention`` (QK^T + PV, full N x N) and ``total``, in FLOP (exact ints).
    """
    b, n, d, f, layers, h, dh, vocab = model_shape(model)
    t = b * n
    gemm = layers * (4 * 2 * t * d * d + 3 * 2 * t * d * f) + 2 * t * d * vocab
    attention = layers * 2 * (2 * b * h * n * n * dh)
    return {"gemm": gemm, "attention": attention, "total": gemm + attention}


def step_flops(model: dict, mode: str) -> dict[str, int]:
    """FLOPs of one harness step: forward only for "forward", forward + 2x-forward backward otherwise."""
    fwd = forward_flops(model)
    factor = 1 if mode == "forward" else 3
    return {k: factor * v for k, v in fwd.items()}


def parameter_tensors(model: dict) -> tuple[int, int]:
    """(number of parameter tensors, number of parameter elements) of the model.

    Embedding, per layer 2 RMSNorm gains + q/k/v/o + w1/w2/w3, final norm, untied lm_head.
    """
    _, _, d, f, layers, _, _, vocab = model_shape(model)
    tensors = 1 + 9 * layers + 2
    elements = vocab * d + layers * (4 * d * d + 3 * d * f + 2 * d) + d + d * vocab
    return tensors, elements


def adamw_bytes(model: dict, dtype_bytes: int = 4) -> int:
    """Operand bytes read and written by one step of the hand-written AdamW (workloads.models.AdamW).

    ``ADAMW_ACCESSES_PER_ELEMENT`` (23) accesses of ``dtype_bytes`` per parameter
    element (parameters, grads and both moments are fp32; autocast does not change
    them). It counts what each kernel reads and writes; DRAM traffic is lower only
    where an operand is still in L2 (small tensors, g read twice by addcmul).
    """
    _, elements = parameter_tensors(model)
    return ADAMW_ACCESSES_PER_ELEMENT * dtype_bytes * elements


def kernel_time_in_ranges(
    ranges: pd.DataFrame, ops: pd.DataFrame, launched: pd.DataFrame, categories=None
) -> pd.DataFrame:
    """Kernel time launched while each range was open, by any thread of its process.

    Backward kernels are launched by autograd's worker thread, so nsys-style
    same-thread projection would miss them; the launch window is what counts here.

    Args:
        ranges: NVTX_RANGES rows (start_ns, end_ns, pid).
        ops: ``analyze.breakdown.gpu_ops`` table (is_kernel, category, duration_ns).
        launched: ``analyze.projection.launches(ops, runtime)``.
        categories: kernel categories to keep (None: all kernels).

    Returns:
        Indexed like ``ranges``: ``kernels`` (count) and ``kernel_ns`` (summed durations, ns).
    """
    pairs = attribute(ranges.assign(tid=0, end_tid=-1), launched.assign(tid=0))
    rows = pairs["op_row"].to_numpy().astype("int64")
    keep = ops["is_kernel"].to_numpy()[rows]
    if categories is not None:
        keep &= ops["category"].astype(str).isin(list(categories)).to_numpy()[rows]
    dur = ops["duration_ns"].to_numpy()[rows][keep]
    by = pd.DataFrame({"range_row": pairs["range_row"].to_numpy()[keep], "ns": dur}).groupby("range_row")["ns"]
    out = pd.DataFrame({"kernels": by.size(), "kernel_ns": by.sum()}).reindex(ranges.index).fillna(0)
    return out.astype("int64")


def gemm_peak_key(precision: str, allow_tf32: bool | None) -> tuple[str, str]:
    """Which calibrated GEMM ceiling applies to a run: (dtype key of calibration["gemm"], why).

    bf16/fp16 autocast runs their matmuls in that dtype; fp32 runs use TF32
    tensor cores only when ``torch.backends.cuda.matmul.allow_tf32`` was on
    (PyTorch's default is off). When the flag was not recorded, fp32 is assumed.
    """
    if precision in ("bf16", "fp16"):
        return precision, f"{precision} autocast"
    if allow_tf32 is None:
        return "fp32", "allow_tf32 not recorded: assumed off (PyTorch's default), fp32 peak"
    return ("tf32", "allow_tf32 on") if allow_tf32 else ("fp32", "allow_tf32 off")


def rate(amount: float, ns: float) -> float:
    """``amount`` per second over ``ns`` nanoseconds (NaN when the time is not positive)."""
    return amount / (ns * 1e-9) if ns and ns > 0 and np.isfinite(ns) else np.nan
