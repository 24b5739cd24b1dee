"""The CS336 assignment-2 Transformer LM (cs336-basics ``BasicsTransformerLM``), NVTX-annotated.

Shapes and architecture follow CS336 assignment 2's reference model (cs336-basics BasicsTransformerLM): token embedding, pre-norm blocks
(RMSNorm eps 1e-5 in fp32, causal multi-head attention with bias-free q/k/v/o
projections and RoPE theta 10000, SwiGLU feed-forward), final RMSNorm, untied
lm_head. Softmax and AdamW are written out by hand as in the reference, because
their many small elementwise kernels are what makes this model's profile
interesting. Range names are fixed so reports can look them up.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from profiler_kit.workloads.common import nvtx_range
from torch import nn

VOCAB = 10_000

# size: (d_model, d_ff, layers, heads): CS336 assignment 2's model sizes, plus "tiny" for CPU tests
SIZES: dict[str, tuple[int, int, int, int]] = {
    "tiny": (64, 128, 2, 4),
    "small": (768, 3072, 12, 12),
    "medium": (1024, 4096, 24, 16),
    "large": (1280, 5120, 36, 20),
    "xl": (1600, 6400, 48, 25),
    "2.7B": (2560, 10240, 32, 32),
}
MODES = ("forward", "forward_backward", "train")
PRECISIONS = ("fp32", "bf16", "fp16")
ATTENTION_IMPLS = ("reference", "sdpa", "flash_pytorch", "flash_triton")
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class RunSpec:
    """One run: what to build and how to step it. ``run_id`` names its output folder.

    ``workload`` is "lm" (the Transformer, ``size`` from SIZES) or "attention"
    (one attention layer: ``ctx`` is the sequence length, ``heads``/``d_head``
    its shape, ``attention`` the implementation).
    """

    workload: str = "lm"
    size: str = "small"
    ctx: int = 512
    batch: int = 4
    mode: str = "train"
    precision: str = "fp32"
    compile: bool = False
    attention: str = "reference"
    fused_adamw: bool = False
    warmup: int = 5
    steps: int = 10
    device: str = "cuda"
    seed: int = 0
    heads: int = 0
    d_head: int = 0

    def __post_init__(self):
        if self.workload == "lm" and self.size not in SIZES:
            raise ValueError(f"unknown size {self.size!r}; one of {', '.join(SIZES)}")
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; one of {', '.join(MODES)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; one of {', '.join(PRECISIONS)}")
        if self.workload == "lm" and self.attention not in ATTENTION_IMPLS:
            raise ValueError(f"unknown attention {self.attention!r}; one of {', '.join(ATTENTION_IMPLS)}")

    @property
    def run_id(self) -> str:
        """A predictable folder name: ``xl_ctx512_train_bf16`` plus suffixes for non-defaults."""
        if self.workload == "attention":
            head = f"attention_{self.attention}_seq{self.ctx}_d{self.d_head}_h{self.heads}_b{self.batch}"
            parts = [head, self.mode, self.precision]
        else:
            parts = [self.size, f"ctx{self.ctx}", self.mode, self.precision]
            if self.attention != "reference":
                parts.append(self.attention)
            if self.batch != 4:
                parts.append(f"b{self.batch}")
            if self.fused_adamw:
                parts.append("fusedadamw")
        if self.compile:
            parts.append("compiled")
        if self.device == "cpu":
            parts.append("cpu")
        return "_".join(parts)

    def to_dict(self) -> dict:
        return asdict(self)


def model_config(spec: RunSpec) -> dict:
    """Shapes of the run's model, stored in run.json so FLOPs can be computed from them later."""
    d_model, d_ff, layers, heads = SIZES[spec.size]
    return {
        "vocab": VOCAB,
        "d_model": d_model,
        "d_ff": d_ff,
        "layers": layers,
        "heads": heads,
        "d_head": d_model // heads,
        "batch": spec.batch,
        "ctx": spec.ctx,
    }


def _trunc_normal(shape: tuple[int, ...], std: float, device, dtype=torch.float32) -> nn.Parameter:
    w = torch.empty(shape, device=device, dtype=dtype)
    nn.init.trunc_normal_(w, mean=0.0, std=std, a=-3 * std, b=3 * std)
    return nn.Parameter(w)


class Linear(nn.Module):
    """Bias-free linear layer, weight (out, in), truncated-normal init as in cs336-basics."""

    def __init__(self, d_in: int, d_out: int, device=None):
        super().__init__()
        self.weight = _trunc_normal((d_out, d_in), math.sqrt(2.0 / (d_in + d_out)), device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.T


class Embedding(nn.Module):
    def __init__(self, vocab: int, d_model: int, device=None):
        super().__init__()
        self.weight = _trunc_normal((vocab, d_model), 1.0, device)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.weight[tokens]


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * g, computed in fp32 and cast back to the input dtype."""

    def __init__(self, d_model: int, eps: float = 1e-5, device=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        in_dtype = x.dtype
        x = x.to(torch.float32)
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x / rms * self.weight).to(in_dtype)


class RotaryEmbedding(nn.Module):
    """RoPE on interleaved pairs (x[2i], x[2i+1]) rotated by position * theta^(-2i/d)."""

    def __init__(self, context_length: int, d_head: int, theta: float = 10000.0, device=None):
        super().__init__()
        freqs = theta ** (-torch.arange(0, d_head, 2, device=device, dtype=torch.float32) / d_head)
        angles = torch.arange(context_length, device=device, dtype=torch.float32)[:, None] * freqs[None, :]
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos[positions], self.sin[positions]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return out.flatten(-2)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Hand-written softmax as in the reference: max-subtract, exp, sum, divide (4+ kernels)."""
    shifted = x - x.amax(dim=dim, keepdim=True)
    e = torch.exp(shifted)
    return e / e.sum(dim=dim, keepdim=True)


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """softmax(q k^T / sqrt(d), causal mask) v, with the course's NVTX range names."""
    with nvtx_range("computing attention scores"):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            n_q, n_k = q.shape[-2], k.shape[-2]
            mask = torch.arange(n_q, device=q.device)[:, None] >= torch.arange(n_k, device=q.device)[None, :]
            scores = scores.masked_fill(~mask, float("-inf"))
    with nvtx_range("computing softmax"):
        probs = softmax(scores, dim=-1)
    with nvtx_range("final matmul"):
        return probs @ v


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def resolve_attention(impl: str) -> Callable:
    """The attention function ``f(q, k, v, causal)`` on (batch, heads, seq, d_head) tensors.

    "flash_pytorch"/"flash_triton" come from ``workloads.attention.get_impl``
    (the FlashAttention-2 autograd Functions), imported only when asked for.
    """
    if impl == "reference":
        return reference_attention
    if impl == "sdpa":
        return sdpa_attention
    try:
        from profiler_kit.workloads.attention import get_impl
    except ImportError as err:
        raise ValueError(f"attention {impl!r} needs workloads.attention, which is not available: {err}") from None
    return get_impl({"flash_pytorch": "flash_pytorch", "flash_triton": "triton"}[impl])


class CausalMultiHeadSelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, rope: RotaryEmbedding, attention: Callable, device=None):
        super().__init__()
        self.heads = heads
        self.q_proj = Linear(d_model, d_model, device)
        self.k_proj = Linear(d_model, d_model, device)
        self.v_proj = Linear(d_model, d_model, device)
        self.output_proj = Linear(d_model, d_model, device)
        self.rope = rope
        self.attention = attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (
            p(x).view(b, n, self.heads, d // self.heads).transpose(1, 2)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        positions = torch.arange(n, device=x.device)
        q, k = self.rope(q, positions), self.rope(k, positions)
        with nvtx_range("scaled dot product attention"):
            out = self.attention(q, k, v, True)
        return self.output_proj(out.transpose(1, 2).reshape(b, n, d))


class SwiGLU(nn.Module):
    """w2(silu(w1 x) * w3 x)."""

    def __init__(self, d_model: int, d_ff: int, device=None):
        super().__init__()
        self.w1 = Linear(d_model, d_ff, device)
        self.w2 = Linear(d_ff, d_model, device)
        self.w3 = Linear(d_model, d_ff, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.w1(x)
        return self.w2(a * torch.sigmoid(a) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, d_model, d_ff, heads, rope, attention, device=None):
        super().__init__()
        self.ln1 = RMSNorm(d_model, device=device)
        self.attn = CausalMultiHeadSelfAttention(d_model, heads, rope, attention, device)
        self.ln2 = RMSNorm(d_model, device=device)
        self.ffn = SwiGLU(d_model, d_ff, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        with nvtx_range("feed forward"):
            return x + self.ffn(self.ln2(x))


class TransformerLM(nn.Module):
    def __init__(self, size: str, context_length: int, attention: str = "reference", device=None):
        super().__init__()
        d_model, d_ff, layers, heads = SIZES[size]
        self.token_embeddings = Embedding(VOCAB, d_model, device)
        # one RoPE table shared by all layers (a buffer, not parameters)
        self.rope = RotaryEmbedding(context_length, d_model // heads, device=device)
        attn = resolve_attention(attention)
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, d_ff, heads, self.rope, attn, device) for _ in range(layers)
        )
        self.ln_final = RMSNorm(d_model, device=device)
        self.lm_head = Linear(d_model, VOCAB, device)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.token_embeddings(tokens)
        for i, layer in enumerate(self.layers):
            with nvtx_range(f"layer_{i}"):
                x = layer(x)
        return self.lm_head(self.ln_final(x))


class AdamW(torch.optim.Optimizer):
    """Hand-written AdamW (one kernel per elementwise op, like the course's).

    Same update as ``torch.optim.AdamW`` (decoupled decay first, eps added after
    the bias-corrected square root) so the two agree to rounding.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["t"] = 0
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                state["t"] += 1
                t, m, v, g = state["t"], state["m"], state["v"], p.grad
                p.mul_(1 - lr * wd)
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                denom = (v.sqrt() / math.sqrt(1 - b2**t)).add_(eps)
                p.addcdiv_(m, denom, value=-lr / (1 - b1**t))


class LMWorkload:
    """A built model, optimizer and batch; ``step(timer)`` runs one step of ``spec.mode``.

    ``timer(name)`` is a context-manager factory the harness passes to time each
    phase (forward, backward, optimizer, step). Forward-only mode runs under
    ``torch.no_grad()`` (inference: no activations kept for backward).
    """

    def __init__(self, spec: RunSpec):
        self.spec = spec
        device = torch.device(spec.device)
        torch.manual_seed(spec.seed)
        self.model = TransformerLM(spec.size, spec.ctx, spec.attention, device=device)
        self.forward_fn = torch.compile(self.model) if spec.compile else self.model
        self.optimizer = None
        if spec.mode == "train":
            params = list(self.model.parameters())
            if spec.fused_adamw:
                self.optimizer = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, fused=True)
            else:
                self.optimizer = AdamW(params, lr=1e-4, weight_decay=0.01)
        self.tokens = torch.randint(0, VOCAB, (spec.batch, spec.ctx), device=device)
        self.targets = torch.randint(0, VOCAB, (spec.batch, spec.ctx), device=device)
        dtype = AUTOCAST_DTYPES.get(spec.precision)
        self._autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else nullcontext

    def step(self, timer: Callable = lambda name: nullcontext()) -> None:
        """One step of ``spec.mode``; the loss stays on the device (reading it would synchronize)."""
        mode = self.spec.mode
        if mode != "forward":
            self.model.zero_grad(set_to_none=True)
        with nvtx_range("step"), timer("step"):
            with nvtx_range("forward"), timer("forward"):
                grad = torch.no_grad() if mode == "forward" else nullcontext()
                with grad, self._autocast():
                    logits = self.forward_fn(self.tokens)
                    loss = F.cross_entropy(logits.view(-1, VOCAB).float(), self.targets.view(-1))
            if mode != "forward":
                with nvtx_range("backward"), timer("backward"):
                    loss.backward()
            if mode == "train":
                with nvtx_range("optimizer"), timer("optimizer"):
                    self.optimizer.step()
        self.loss = loss


def build(spec: RunSpec) -> LMWorkload:
    """The workload for ``spec`` (STYLE.md: workloads expose build(spec) and step())."""
    return LMWorkload(spec)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
