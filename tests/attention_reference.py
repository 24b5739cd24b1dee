"""Float64 reference attention (materialized softmax) with autograd gradients, for the attention tests."""

from __future__ import annotations

import math

import torch


def reference_attention(q, k, v, causal: bool, do) -> dict[str, torch.Tensor]:
    """O, L (natural-log logsumexp), dQ, dK, dV in float64 for upstream gradient ``do``."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    s = q64 @ k64.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
    o = torch.softmax(s, -1) @ v64
    o.backward(do.double())
    return {"o": o.detach(), "L": torch.logsumexp(s, -1).detach(), "dq": q64.grad, "dk": k64.grad, "dv": v64.grad}
