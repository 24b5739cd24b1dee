"""FlashAttention-2 as a tiled pure-PyTorch ``autograd.Function``.

The point of this version is to show the algorithm, not to be fast: the forward
walks key tiles with an online softmax and never materializes the full
``seq x seq`` score matrix; it saves only ``L`` (the row logsumexp) with Q, K,
V and O. The backward recomputes the probabilities tile by tile from ``L`` and
uses ``D = rowsum(dO * O)`` (FlashAttention-2, Dao 2023, Algorithm 2).

Inputs are ``(..., seq, d)``: ``(batch, seq, d)`` and ``(batch, heads, seq,
d)`` both work. Any sequence length works; the last tile is simply shorter.
"""

from __future__ import annotations

import math

import torch


def _tiles(n: int, size: int) -> list[tuple[int, int]]:
    return [(s, min(s + size, n)) for s in range(0, n, size)]


def flash_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False, tile_q: int = 64, tile_k: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled FlashAttention-2 forward.

    Returns:
        ``(O, L)``: O in the input dtype, L (natural-log logsumexp of each
        scaled score row) in fp32 with shape ``q.shape[:-1]``.
    """
    if tile_q < 16 or tile_k < 16:
        raise ValueError("tiles must be at least 16x16")
    n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d)
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    for qs, qe in _tiles(n_q, tile_q):
        qi = q[..., qs:qe, :].float()
        m = torch.full(qi.shape[:-1], -math.inf, device=q.device)
        l_sum = torch.zeros_like(m)
        acc = torch.zeros_like(qi)
        rows = torch.arange(qs, qe, device=q.device)
        for ks, ke in _tiles(n_k, tile_k):
            if is_causal and ks > qe - 1:
                break  # every later key tile is fully masked
            s = qi @ k[..., ks:ke, :].float().transpose(-1, -2) * scale
            if is_causal and ke - 1 > qs:
                cols = torch.arange(ks, ke, device=q.device)
                s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)
            m_new = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m_new[..., None])
            alpha = torch.exp(m - m_new)
            l_sum = alpha * l_sum + p.sum(-1)
            acc = alpha[..., None] * acc + p @ v[..., ks:ke, :].float()
            m = m_new
        out[..., qs:qe, :] = (acc / l_sum[..., None]).to(q.dtype)
        lse[..., qs:qe] = m + torch.log(l_sum)
    return out, lse


def flash_backward(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    is_causal: bool = False,
    tile_q: int = 64,
    tile_k: int = 64,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tiled backward by recomputation: P = exp(S - L), D = rowsum(dO * O).

    Returns:
        ``(dQ, dK, dV)`` in the input dtype.
    """
    n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d)
    delta = (do.float() * o.float()).sum(-1)
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dk = torch.zeros(k.shape, dtype=torch.float32, device=q.device)
    dv = torch.zeros(v.shape, dtype=torch.float32, device=q.device)
    for ks, ke in _tiles(n_k, tile_k):
        kj, vj = k[..., ks:ke, :].float(), v[..., ks:ke, :].float()
        dkj, dvj = torch.zeros_like(kj), torch.zeros_like(vj)
        cols = torch.arange(ks, ke, device=q.device)
        for qs, qe in _tiles(n_q, tile_q):
            if is_causal and qe - 1 < ks:
                continue  # query tile entirely before this key tile
            qi, doi = q[..., qs:qe, :].float(), do[..., qs:qe, :].float()
            s = qi @ kj.transpose(-1, -2) * scale
            p = torch.exp(s - lse[..., qs:qe, None])
            if is_causal and ke - 1 > qs:
                rows = torch.arange(qs, qe, device=q.device)
                p = p.masked_fill(cols[None, :] > rows[:, None], 0.0)
            dvj += p.transpose(-1, -2) @ doi
            dp = doi @ vj.transpose(-1, -2)
            ds = p * (dp - delta[..., qs:qe, None])
            dq[..., qs:qe, :] += ds @ kj * scale
            dkj += ds.transpose(-1, -2) @ qi * scale
        dk[..., ks:ke, :] = dkj
        dv[..., ks:ke, :] = dvj
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class FlashAttention2PyTorch(torch.autograd.Function):
    """``FlashAttention2PyTorch.apply(q, k, v, is_causal=False)``; saves L, Q, K, V, O for backward."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False):
        o, lse = flash_forward(q, k, v, is_causal)
        ctx.save_for_backward(lse, q, k, v, o)
        ctx.is_causal = is_causal
        return o

    @staticmethod
    def backward(ctx, do):
        lse, q, k, v, o = ctx.saved_tensors
        dq, dk, dv = flash_backward(do, q, k, v, o, lse, ctx.is_causal)
        return dq, dk, dv, None
