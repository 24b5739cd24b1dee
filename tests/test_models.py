"""The Transformer LM's hand-written pieces against torch references, and every mode on the CPU."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from profiler_kit.workloads.models import (
    SIZES,
    VOCAB,
    AdamW,
    RMSNorm,
    RotaryEmbedding,
    RunSpec,
    TransformerLM,
    build,
    count_parameters,
    reference_attention,
    softmax,
)


def test_softmax_matches_torch_on_large_logits():
    x = torch.randn(3, 7, 50, dtype=torch.float64) * 100
    torch.testing.assert_close(softmax(x, dim=-1), F.softmax(x, dim=-1), rtol=0, atol=1e-12)
    assert torch.isfinite(softmax(torch.tensor([1000.0, 1001.0]))).all()


def test_rmsnorm_matches_torch_and_keeps_input_dtype():
    norm = RMSNorm(16)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(16) + 0.5)
    x = torch.randn(2, 5, 16)
    ref = F.rms_norm(x, (16,), weight=norm.weight, eps=1e-5)
    torch.testing.assert_close(norm(x), ref, rtol=1e-6, atol=1e-6)
    assert norm(x.to(torch.bfloat16)).dtype == torch.bfloat16


def test_rope_matches_complex_rotation():
    d, n, theta = 8, 6, 10000.0
    rope = RotaryEmbedding(n, d, theta)
    x = torch.randn(2, 3, n, d, dtype=torch.float32)
    got = rope(x, torch.arange(n))
    # independent reference: pairs as complex numbers times e^{i * pos * theta^(-2k/d)}
    pairs = torch.view_as_complex(x.double().reshape(2, 3, n, d // 2, 2).contiguous())
    freqs = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    rot = torch.polar(torch.ones(n, d // 2, dtype=torch.float64), torch.arange(n, dtype=torch.float64)[:, None] * freqs)
    want = torch.view_as_real(pairs * rot).reshape(2, 3, n, d).float()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # position 0 is the identity; norms are preserved
    torch.testing.assert_close(got[..., 0, :], x[..., 0, :])
    torch.testing.assert_close(got.norm(dim=-1), x.norm(dim=-1), rtol=1e-5, atol=1e-5)


def test_reference_attention_matches_sdpa_causal():
    q, k, v = (torch.randn(2, 3, 9, 8, dtype=torch.float64) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(reference_attention(q, k, v, True), want, rtol=1e-10, atol=1e-10)


def test_adamw_matches_torch_after_steps():
    torch.manual_seed(0)
    p_ours = [torch.nn.Parameter(torch.randn(5, 4)), torch.nn.Parameter(torch.randn(3))]
    p_ref = [torch.nn.Parameter(p.detach().clone()) for p in p_ours]
    kw = {"lr": 1e-2, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
    ours, ref = AdamW(p_ours, **kw), torch.optim.AdamW(p_ref, **kw)
    for _ in range(6):
        grads = [torch.randn_like(p) for p in p_ours]
        for p, q, g in zip(p_ours, p_ref, grads, strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
    for p, q in zip(p_ours, p_ref, strict=True):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=0, atol=1e-6)
        assert not torch.equal(p.detach(), torch.zeros_like(p))


@pytest.mark.parametrize("size", list(SIZES))
def test_parameter_count_matches_architecture_formula(size):
    d, d_ff, layers, _ = SIZES[size]
    # embedding + lm_head (untied) + per layer (q,k,v,o + w1,w2,w3 + two RMSNorm gains) + final RMSNorm
    formula = 2 * VOCAB * d + layers * (4 * d * d + 3 * d * d_ff + 2 * d) + d
    assert count_parameters(TransformerLM(size, 16, device="meta")) == formula


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("mode", ["forward", "forward_backward", "train"])
def test_tiny_model_runs_every_mode(mode, precision):
    w = build(RunSpec(size="tiny", ctx=16, batch=2, mode=mode, precision=precision, device="cpu"))
    before = [p.detach().clone() for p in w.model.parameters()]
    w.step()
    assert torch.isfinite(w.loss)
    assert abs(w.loss.item() - math.log(VOCAB)) < 3  # an untrained LM is near uniform
    grads = [p.grad for p in w.model.parameters()]
    changed = any(not torch.equal(a, p.detach()) for a, p in zip(before, w.model.parameters(), strict=True))
    if mode == "forward":
        assert all(g is None for g in grads) and not changed
    else:
        assert all(g is not None and torch.isfinite(g).all() for g in grads)
        assert changed == (mode == "train")


def test_sdpa_model_matches_reference_model():
    spec = RunSpec(size="tiny", ctx=12, batch=2, mode="forward", device="cpu")
    ref, alt = build(spec), build(RunSpec(**{**spec.to_dict(), "attention": "sdpa"}))
    alt.model.load_state_dict(ref.model.state_dict())
    torch.testing.assert_close(alt.model(ref.tokens), ref.model(ref.tokens), rtol=1e-4, atol=1e-4)


def test_runspec_names_and_validation():
    assert RunSpec(size="xl", ctx=512, mode="train", precision="bf16").run_id == "xl_ctx512_train_bf16"
    assert RunSpec(size="tiny", ctx=32, device="cpu", compile=True).run_id == "tiny_ctx32_train_fp32_compiled_cpu"
    with pytest.raises(ValueError, match="unknown size"):
        RunSpec(size="huge")
    with pytest.raises(ValueError, match="unknown mode"):
        RunSpec(mode="inference")
