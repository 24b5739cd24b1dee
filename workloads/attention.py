"""Attention implementations people profile side by side, and one recordable step.

- ``naive``: materialized ``seq x seq`` scores, causal mask, hand-written
  softmax in fp32 (max-subtract, exp, sum, divide), as the CS336 reference
  model does; its three stages run in the NVTX ranges the course uses.
- ``compiled``: ``torch.compile`` of ``naive``.
- ``flash_pytorch``: tiled FlashAttention-2 in plain PyTorch (``flash_pytorch.py``).
- ``triton``: FlashAttention-2 in Triton (``flash_triton.py``); backward picked by ``flash_triton`` (TMA-reduce dQ for 16-bit inputs on Hopper, else two kernels).
- ``triton_atomic``: the same with the one-kernel backward (dQ by fp32 atomics).
- ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` (PyTorch picks the backend).

Every implementation takes ``(..., seq, d)`` tensors and ``causal``.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from profiler_kit.workloads.common import nvtx_range, sync

IMPLS = ("naive", "compiled", "flash_pytorch", "triton", "triton_atomic", "sdpa")


def _no_range(name: str) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


def _naive(q, k, v, causal, stage):
    with stage("computing attention scores"):
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            n = q.shape[-2]
            mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
    with stage("computing softmax"):
        s = scores.float()
        e = torch.exp(s - s.amax(-1, keepdim=True))
        probs = (e / e.sum(-1, keepdim=True)).to(v.dtype)
    with stage("final matmul"):
        return probs @ v


def attention_naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """Materialized attention; NVTX ranges name the scores, softmax and output matmul."""
    return _naive(q, k, v, causal, nvtx_range)


def _naive_plain(q, k, v, causal):
    return _naive(q, k, v, causal, _no_range)


@functools.cache
def _compiled() -> Callable:
    return torch.compile(_naive_plain)  # NVTX calls would only break the graph


def attention_compiled(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """``torch.compile(attention_naive)``, compiled once per process."""
    return _compiled()(q, k, v, causal)


def attention_flash_pytorch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    from profiler_kit.workloads.flash_pytorch import FlashAttention2PyTorch

    return FlashAttention2PyTorch.apply(q, k, v, causal)


def attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    from profiler_kit.workloads.flash_triton import FlashAttention2Triton

    return FlashAttention2Triton.apply(q, k, v, causal)


def attention_triton_atomic(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    from profiler_kit.workloads.flash_triton import FlashAttention2Triton

    return FlashAttention2Triton.apply(q, k, v, causal, True)


def attention_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """PyTorch's fused attention (flash / memory-efficient / cuDNN / math, its choice); K/V with fewer heads
    than Q are grouped-query attention (``enable_gqa``)."""
    gqa = k.dim() >= 4 and k.shape[-3] != q.shape[-3]
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)


def get_impl(name: str) -> Callable:
    """The attention function for an implementation name in ``IMPLS``."""
    impls = {
        "naive": attention_naive,
        "compiled": attention_compiled,
        "flash_pytorch": attention_flash_pytorch,
        "triton": attention_triton,
        "triton_atomic": attention_triton_atomic,
        "sdpa": attention_sdpa,
    }
    if name not in impls:
        raise ValueError(f"unknown attention impl {name!r}; choose from {', '.join(IMPLS)}")
    return impls[name]


def make_inputs(
    batch: int,
    heads: int,
    seq: int,
    d_head: int,
    dtype: torch.dtype,
    device: torch.device | str,
    requires_grad: bool = True,
    seed: int = 0,
    kv_heads: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random q, k, v of shape (batch, heads, seq, d_head), or (batch, seq, d_head) when heads is 0;
    ``kv_heads`` (0: ``heads``) gives k and v fewer heads (grouped-query attention)."""
    shape = (batch, heads, seq, d_head) if heads else (batch, seq, d_head)
    kv_shape = (batch, kv_heads, seq, d_head) if heads and kv_heads else shape
    gen = torch.Generator(device=device).manual_seed(seed)
    return tuple(
        torch.randn(s, generator=gen, device=device, dtype=dtype).requires_grad_(requires_grad)
        for s in (shape, kv_shape, kv_shape)
    )


def attention_step(
    impl: str,
    batch: int,
    heads: int,
    seq: int,
    d_head: int,
    dtype: torch.dtype,
    causal: bool,
    device: torch.device | str,
    backward: bool = True,
) -> Callable[[], None]:
    """A callable running one forward (and backward of ``o.sum()``) in NVTX ranges "forward"/"backward".

    Inputs are allocated once, here, so a recorded step contains only attention
    kernels. Gradients are reset between calls so memory stays flat.
    """
    fn = get_impl(impl)
    q, k, v = make_inputs(batch, heads, seq, d_head, dtype, device, requires_grad=backward)

    def step() -> None:
        for t in (q, k, v):
            t.grad = None
        with nvtx_range("forward"):
            out = fn(q, k, v, causal)
        if backward:
            with nvtx_range("backward"):
                out.sum().backward()
        sync(device)

    return step
