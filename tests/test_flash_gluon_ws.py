"""The warp-specialized Gluon dK/dV kernel (workloads/flash_gluon_ws.py, results/attention run 15).

On a CUDA sm_90 GPU: the backward with ``mode="gluon_ws"`` against the ``tma`` backward on the same inputs.
Without one: the default config compiles for sm_90 offline (Triton ships ptxas) with no spills and no
serialized wgmma, in a few seconds.
"""

from __future__ import annotations

import importlib.util
import re

import pytest

from tests.gluon_helpers import gluon_available, ptxas_spills, sm90

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")


@pytest.mark.skipif(not gluon_available(), reason="triton without Gluon")
def test_compiles_for_sm90_without_loop_spills(tmp_path):
    from profiler_kit.workloads import flash_gluon_ws as ws

    compiled = ws.compile_sm90(ws.DEFAULT, n=1024)
    ptx = compiled.asm["ptx"]
    regs = {int(x) for x in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)}
    assert 24 in regs and max(regs) >= 192, regs  # the load warp gives registers to the consumers
    assert compiled.metadata.shared < 227 * 1024, compiled.metadata.shared
    spills, log = ptxas_spills(ptx, tmp_path)
    assert spills and max(spills) <= 16, log  # at most a word around the register reallocation


@pytest.mark.skipif(not gluon_available() or not sm90(), reason="needs a CUDA sm_90 GPU")
@pytest.mark.parametrize(
    ("n", "causal", "dtype", "heads"),
    [(128, True, "bfloat16", 2), (1024, True, "bfloat16", 3), (1024, False, "float16", 2), (2048, True, "bfloat16", 8)],
)
def test_matches_tma_backward(n, causal, dtype, heads):
    import torch
    from profiler_kit.workloads import flash_gluon_ws as ws
    from profiler_kit.workloads.flash_triton import backward_kernels, forward_kernels

    gen = torch.Generator(device="cuda").manual_seed(n + heads)
    q, k, v, do = (
        torch.randn(heads, n, 64, device="cuda", dtype=getattr(torch, dtype), generator=gen) for _ in range(4)
    )
    o, lse = forward_kernels(q, k, v, causal)
    want = backward_kernels(do, q, k, v, o, lse, causal, "tma")
    for config in ws.CONFIGS.values():
        for _ in range(2):  # the first launch compiles, the second calls the compiled kernel directly
            got = backward_kernels(do, q, k, v, o, lse, causal, "gluon_ws", config)
            dq, dk, dv = got
            assert torch.equal(dk, want[1]) and torch.equal(dv, want[2]), config  # same products, same order
            assert torch.isfinite(dq).all()
            assert ((dq.float() - want[0].float()).norm() / want[0].float().norm()).item() < 1e-4, config


@pytest.mark.skipif(not gluon_available() or not sm90(), reason="needs a CUDA sm_90 GPU")
def test_the_default_backward_of_16_bit_inputs_is_the_warp_specialized_one():
    import torch
    from profiler_kit.workloads import flash_triton as ft

    q = torch.empty(2, 1024, 64, device="cuda", dtype=torch.bfloat16)
    assert ft.resolve_bwd_mode(q, None) == ft.DEFAULT_BWD == "gluon_ws"
    assert ft._gluon_ws(q) is not None
    assert ft._gluon_ws(q[:, :, :32].contiguous()) is None  # head dim 32: the tma kernel
    assert ft._gluon_ws(q[:, :1000].contiguous()) is None  # no whole number of 128-key programs
    ft.GLUON_WS_TRITON, kept = "9.9.", ft.GLUON_WS_TRITON
    try:
        assert ft._gluon_ws(q) is None  # another Triton release: the tma kernel
    finally:
        ft.GLUON_WS_TRITON = kept


@pytest.mark.skipif(not gluon_available() or not sm90(), reason="needs a CUDA sm_90 GPU")
def test_unsupported_lengths_fall_back_to_tma():
    import torch
    from profiler_kit.workloads.flash_triton import backward_kernels, forward_kernels

    q, k, v, do = (torch.randn(2, 192, 64, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    o, lse = forward_kernels(q, k, v, True)
    want = backward_kernels(do, q, k, v, o, lse, True, "tma")
    got = backward_kernels(do, q, k, v, o, lse, True, "gluon_ws", (3, 128, 192, 96, 24, False, False))
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)


@pytest.mark.skipif(not gluon_available() or not sm90(), reason="needs a CUDA sm_90 GPU")
def test_the_default_backward_under_torch_compile():
    """fullgraph compile through the custom ops: the same gradients as eager, both through the warp-specialized kernel."""
    import torch
    from profiler_kit.workloads.flash_triton import FlashAttention2Triton

    gen = torch.Generator(device="cuda").manual_seed(5)
    q, k, v = (
        torch.randn(1, 4, 1024, 64, device="cuda", dtype=torch.bfloat16, generator=gen, requires_grad=True)
        for _ in range(3)
    )
    compiled = torch.compile(
        lambda a, b, c: FlashAttention2Triton.apply(a, b, c, True), backend="aot_eager", fullgraph=True
    )
    compiled(q, k, v).sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    FlashAttention2Triton.apply(q, k, v, True).sum().backward()
    for got, t in zip(grads, (q, k, v), strict=True):
        torch.testing.assert_close(got, t.grad, atol=1e-2, rtol=0)  # dQ: fp32 sums in another order, then bf16
