"""Triton FlashAttention-2 under TRITON_INTERPRET=1; run by tests/test_attention.py in a subprocess.

The interpreter must be switched on before ``triton`` is imported, which a
shared pytest process cannot promise, hence the separate process.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("run through tests/test_attention.py (needs TRITON_INTERPRET=1)", allow_module_level=True)

import torch  # noqa: E402
from profiler_kit.workloads.flash_triton import (  # noqa: E402
    FlashAttention2Triton,
    backward_kernels,
    forward_kernels,
    triton_forward,
)

from tests.attention_reference import reference_attention  # noqa: E402


@pytest.mark.parametrize("seq", [16, 37, 80])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [16, 32])
@pytest.mark.parametrize("bwd_mode", ["two_kernel", "atomic", "tma"])
def test_triton_matches_reference_fp32(seq, causal, d, bwd_mode):
    gen = torch.Generator().manual_seed(seq * 100 + d + causal)
    q, k, v = (torch.randn(2, seq, d, generator=gen, requires_grad=True) for _ in range(3))
    do = torch.randn(2, seq, d, generator=gen)
    o = FlashAttention2Triton.apply(q, k, v, causal, bwd_mode)
    o.backward(do)
    _, lse = triton_forward(q.detach(), k.detach(), v.detach(), causal)
    ref = reference_attention(q, k, v, causal, do)
    # fp32 dots are exact in the interpreter: far tighter than the 1e-2 bar
    for name, got in [("o", o), ("L", lse), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)]:
        torch.testing.assert_close(got.double(), ref[name], atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


# bf16 is checked on the GPU only: Triton 3.6's interpreter computes tl.dot on
# bf16 operands wrongly (a 16x16 bf16 product is off by ~1e10 there).
@pytest.mark.parametrize("dtype", [torch.float16])
@pytest.mark.parametrize("bwd_mode", [False, "two_kernel", "atomic", "tma"])
def test_triton_half_precision_and_4d(dtype, bwd_mode):
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, 48, 16, generator=gen).to(dtype).requires_grad_() for _ in range(3))
    o = FlashAttention2Triton.apply(q, k, v, True, bwd_mode)
    assert o.dtype == dtype and o.shape == q.shape
    do = torch.randn(o.shape, generator=gen).to(dtype)
    o.backward(do)
    ref = reference_attention(q, k, v, True, do)
    for name, got in [("o", o), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)]:
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), ref[name], atol=1e-2, rtol=1e-2, msg=lambda m, n=name: f"{n}: {m}")


def test_unknown_backward_mode_is_refused():
    q = torch.randn(1, 16, 16, requires_grad=True)
    with pytest.raises(ValueError, match="backward mode"):
        FlashAttention2Triton.apply(q, q, q, True, "nope")


@pytest.mark.parametrize("seq", [16, 37, 80])
@pytest.mark.parametrize("causal", [False, True])
def test_triton_forward_tma_loads(seq, causal):
    """K/V through descriptors over all heads' rows: a ragged tail reads the next head's rows, which must not leak."""
    gen = torch.Generator().manual_seed(seq + 7 * causal)
    q, k, v = (torch.randn(3, seq, 32, generator=gen) for _ in range(3))
    o, lse = forward_kernels(q, k, v, causal, tma=True)
    ref = reference_attention(q, k, v, causal, torch.zeros_like(q))
    torch.testing.assert_close(o.double(), ref["o"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), ref["L"], atol=1e-5, rtol=1e-5)


def test_triton_under_torch_compile():
    """fullgraph compile: no graph break, the kernels appear as the custom ops, values equal eager ones."""
    targets = []

    def backend(gm, example_inputs):
        for mod in gm.modules():
            if isinstance(mod, torch.fx.GraphModule):
                targets.extend(str(n.target) for n in mod.graph.nodes)
        return gm.forward

    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 37, 16, generator=gen, requires_grad=True) for _ in range(3))
    compiled = torch.compile(
        lambda a, b, c: FlashAttention2Triton.apply(a, b, c, True), backend=backend, fullgraph=True
    )
    o = compiled(q, k, v)
    o.sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    o_eager = FlashAttention2Triton.apply(q, k, v, True)
    o_eager.sum().backward()
    assert any("flash2_triton_fwd" in t for t in targets), targets
    torch.testing.assert_close(o, o_eager)
    for got, t in zip(grads, (q, k, v), strict=True):
        torch.testing.assert_close(got, t.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("seq,causal", [(37, True), (80, False), (64, True)])
@pytest.mark.parametrize(
    "opts",
    [
        {"HEAD_GROUP": 1, "QDO_TMA": False, "REORDER": False, "SCALE_DS": False},
        {"QDO_TMA": True, "REORDER": False, "SCALE_DS": False},
        {"QDO_TMA": True, "REORDER": True, "SCALE_DS": True, "HEAD_GROUP": 2},
        {"REORDER": True, "HEAD_GROUP": 3},
    ],
)
@pytest.mark.parametrize("mode", ["tma", "atomic", "two_kernel"])
def test_triton_backward_structure_switches(dtype, seq, causal, opts, mode):
    """dK/dV kernel switches (over BWD_OPTS): same gradients; 3 heads in groups of 2 leave a group of 1."""
    gen = torch.Generator().manual_seed(seq + causal)
    q, k, v, do = (torch.randn(3, seq, 16, generator=gen).to(dtype) for _ in range(4))
    o, lse = forward_kernels(q, k, v, causal)
    grads = backward_kernels(do, q, k, v, o, lse, causal, mode, opts=opts)
    ref = reference_attention(q, k, v, causal, do)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    for name, got in zip(("dq", "dk", "dv"), grads, strict=True):
        torch.testing.assert_close(got.double(), ref[name], atol=tol, rtol=tol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("head_group", [2, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_triton_forward_head_groups(head_group, causal):
    """Launch order in groups of heads (3 heads: a group of 2 and one of 1, or one group smaller than 4)."""
    gen = torch.Generator().manual_seed(11 + causal)
    q, k, v = (torch.randn(3, 50, 16, generator=gen) for _ in range(3))
    o, lse = forward_kernels(q, k, v, causal, head_group=head_group)
    ref = reference_attention(q, k, v, causal, torch.zeros_like(q))
    torch.testing.assert_close(o.double(), ref["o"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), ref["L"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["tma", "atomic", "two_kernel"])
def test_triton_backward_of_sum_and_strided_grads(mode):
    """dO with any strides: the expanded gradient of ``o.sum()`` and a transposed one (copied by the D kernel)."""
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 37, 16, generator=gen, requires_grad=True) for _ in range(3))
    FlashAttention2Triton.apply(q, k, v, True, mode).sum().backward()
    ref = reference_attention(q, k, v, True, torch.ones(1, 2, 37, 16))
    for name, got in [("dq", q.grad), ("dk", k.grad), ("dv", v.grad)]:
        torch.testing.assert_close(got.double(), ref[name], atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    q3, k3, v3 = (t.detach()[0] for t in (q, k, v))
    o, lse = forward_kernels(q3, k3, v3, True)
    transposed = torch.randn(2, 16, 37, generator=gen).transpose(1, 2)  # (2, 37, 16), not contiguous
    per_head = torch.tensor([2.0, -3.0]).view(2, 1, 1).expand(2, 37, 16)  # one value a head: read once a program
    for do in (transposed, per_head):
        grads = backward_kernels(do, q3, k3, v3, o, lse, True, mode)
        ref = reference_attention(q3, k3, v3, True, do.contiguous())
        for name, got in zip(("dq", "dk", "dv"), grads, strict=True):
            torch.testing.assert_close(got.double(), ref[name], atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("mode", ["tma", "two_kernel"])
def test_triton_heads_last_layout(mode):
    """(batch, seq, heads, d) projections transposed to (batch, heads, seq, d), as models hand them over: not
    contiguous, copied once; the kernels take the 4-D tensors as they are (no views), K/V with fewer heads, a dO
    with the same transposed layout (its rows not mergeable: copied), and the grads come back in the leaves' layout."""
    gen = torch.Generator().manual_seed(7)
    q_ = torch.randn(2, 40, 4, 16, generator=gen, requires_grad=True)
    k_, v_ = (torch.randn(2, 40, 2, 16, generator=gen, requires_grad=True) for _ in range(2))
    q, k, v = (t.transpose(1, 2) for t in (q_, k_, v_))
    do = torch.randn(2, 40, 4, 16, generator=gen).transpose(1, 2)
    o = FlashAttention2Triton.apply(q, k, v, True, mode)
    o.backward(do)
    ref = reference_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), True, do.contiguous())
    ref_k, ref_v = (ref[n].view(2, 2, 2, 40, 16).sum(2) for n in ("dk", "dv"))  # sums over each K/V head's group
    assert o.shape == q.shape and q_.grad.shape == q_.shape and k_.grad.shape == k_.shape
    torch.testing.assert_close(o.double(), ref["o"], atol=1e-5, rtol=1e-5)
    for name, got, want in [("dq", q_.grad.transpose(1, 2), ref["dq"]), ("dk", k_.grad.transpose(1, 2), ref_k),
                            ("dv", v_.grad.transpose(1, 2), ref_v)]:  # fmt: skip
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    o4, lse4 = forward_kernels(*(t.detach().contiguous() for t in (q, k, v)), True)
    assert o4.shape == q.shape and lse4.shape == q.shape[:-1]
    torch.testing.assert_close(o4, o.detach(), atol=0, rtol=0)


@pytest.mark.parametrize(("batch", "heads", "kv_heads"), [(2, 4, 2), (1, 3, 1)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mode", ["tma", "two_kernel"])  # "atomic" adds dQ as "tma" does, by elementwise atomics
def test_triton_gqa_matches_sdpa(batch, heads, kv_heads, causal, mode):
    """Grouped-query attention against SDPA's ``enable_gqa=True`` (float64): dK, dV summed over each group."""
    gen = torch.Generator().manual_seed(heads * 10 + kv_heads + causal)
    q = torch.randn(batch, heads, 37, 16, generator=gen, requires_grad=True)
    k, v = (torch.randn(batch, kv_heads, 37, 16, generator=gen, requires_grad=True) for _ in range(2))
    do = torch.randn(batch, heads, 37, 16, generator=gen)
    o = FlashAttention2Triton.apply(q, k, v, causal, mode)
    o.backward(do)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(*ref_in, is_causal=causal, enable_gqa=True)
    ref.backward(do.double())
    assert k.grad.shape == k.shape and v.grad.shape == v.shape
    for name, got, want in [("o", o, ref)] + [
        (f"d{n}", t.grad, r.grad) for n, t, r in zip("qkv", (q, k, v), ref_in, strict=True)
    ]:
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_triton_gqa_half_default_backward_and_bad_heads():
    """fp16 GQA through the default backward; heads that no K/V head count divides are refused."""
    gen = torch.Generator().manual_seed(9)
    q = torch.randn(1, 4, 48, 16, generator=gen).half().requires_grad_()
    k, v = (torch.randn(1, 2, 48, 16, generator=gen).half().requires_grad_() for _ in range(2))
    o = FlashAttention2Triton.apply(q, k, v, True)
    do = torch.randn(o.shape, generator=gen).half()
    o.backward(do)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(*ref_in, is_causal=True, enable_gqa=True)
    ref.backward(do.double())
    for name, got, want in [("o", o, ref)] + [
        (f"d{n}", t.grad, r.grad) for n, t, r in zip("qkv", (q, k, v), ref_in, strict=True)
    ]:
        assert got.dtype == torch.float16
        torch.testing.assert_close(got.double(), want, atol=1e-2, rtol=1e-2, msg=lambda m, n=name: f"{n}: {m}")
    for _ in range(2):  # refused every time (_check remembers only the shapes it passed)
        with pytest.raises(ValueError, match="divisor"):
            FlashAttention2Triton.apply(q, k[:, :1].expand(1, 3, 48, 16), v[:, :1].expand(1, 3, 48, 16), True)


def test_launch_rows_flatten_leading_dims():
    """What the launchers see of a tensor: (batch*heads, seq, d) from any leading dims, one row set for 2-D."""
    from profiler_kit.workloads.triton_launch import rows

    assert rows(torch.empty(2, 3, 5, 16)) == (6, 5, 16)
    assert rows(torch.empty(4, 5, 16)) == (4, 5, 16)
    assert rows(torch.empty(5, 16)) == (1, 5, 16)
    assert rows(torch.empty(2, 0, 5, 16)) == (0, 5, 16)


@pytest.mark.parametrize(("kv_heads", "group"), [(1, 2), (3, 4)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gqa_partials_summed_per_kv_head(kv_heads, group, dtype):
    """The d 128 backward's split GQA path: each K/V head's dK, dV are the fp32 sums of its query heads' partials,
    cast once (against torch's sum of the same partials), in one launch on buffers of any leading dims."""
    from profiler_kit.workloads.flash_gluon_bwd128 import sum_groups

    gen = torch.Generator().manual_seed(kv_heads * 10 + group)
    n, d = 48, 32
    dk32, dv32 = (torch.randn(1, kv_heads * group, n, d, generator=gen) for _ in range(2))
    dk, dv = (torch.full((1, kv_heads, n, d), float("nan"), dtype=dtype) for _ in range(2))
    for _ in range(2):  # a repeated key replays the launch
        sum_groups(dk32, dv32, dk, dv)
    for got, part in ((dk, dk32), (dv, dv32)):
        want = part.view(kv_heads, group, n, d).sum(1).view(got.shape)
        # one rounding of the fp32 sum: within one ulp (the interpreter rounds to bf16 by truncation), or of fp16's
        # smallest subnormal
        ulp = 2**-7 if dtype == torch.bfloat16 else 2**-10
        torch.testing.assert_close(got.float(), want, rtol=ulp, atol=2**-24)
