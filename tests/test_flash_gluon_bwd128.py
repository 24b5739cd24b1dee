"""The warp-specialized Gluon backward at head dim 128 (workloads/flash_gluon_bwd128.py, issue 26).

Without a GPU: every config compiles for sm_90 offline (Triton ships ptxas) with no serialized wgmma and at most a
few spilled scalars. On a CUDA sm_90 GPU: dQ, dK, dV against fp32 math attention, within SDPA's own error on the
same inputs, causal or not, bf16 and fp16, through ``flash_triton.backward_kernels``; grouped-query heads likewise
(``flash_triton.BWD_GLUON128_GQA``, off until that test has passed on a GPU).
"""

from __future__ import annotations

import importlib.util
import math
import re

import pytest

from tests.gluon_helpers import gluon_available, ptxas_spills, sdpa_reference, sm90

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")


@pytest.mark.skipif(not gluon_available(), reason="triton without Gluon")
@pytest.mark.parametrize(
    ("config", "kv_heads", "split", "dtype"),
    [
        ("d128", 0, False, "bfloat16"),
        ("d128", 0, False, "float16"),  # the fp16 layer: the same config, registers and spills as bf16
        ("d128_dq2", 0, False, "bfloat16"),
        ("d128_s3", 0, False, "bfloat16"),
        ("d128", 2, False, "bfloat16"),
        ("d128", 2, True, "bfloat16"),
    ],  # fmt: skip
)
def test_compiles_for_sm90(tmp_path, config, kv_heads, split, dtype):
    import torch
    from profiler_kit.workloads import flash_gluon_bwd128 as g

    dt = getattr(torch, dtype)
    compiled = g.compile_sm90(config, n=1024, is_causal=False, dtype=dt, heads=4, kv_heads=kv_heads, split=split)
    ptx = compiled.asm["ptx"]
    regs = {int(x) for x in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)}
    assert 24 in regs and 240 in regs, regs  # the load warp gives registers to the consumers
    assert compiled.metadata.shared < 227 * 1024, compiled.metadata.shared
    assert "cp.reduce.async.bulk.tensor" in ptx  # dQ added by TMA reduce
    spills, log = ptxas_spills(ptx, tmp_path)
    assert spills and max(spills) <= 160, log  # scalars (addresses), not accumulators
    if dt != torch.bfloat16:
        bf16 = g.compile_sm90(config, n=1024, is_causal=False, heads=4, kv_heads=kv_heads, split=split)
        bf16_spills, bf16_log = ptxas_spills(bf16.asm["ptx"], tmp_path)
        assert (spills, compiled.metadata.shared) == (bf16_spills, bf16.metadata.shared)
        used = re.compile(r"Used (\d+) registers")
        assert used.findall(log) == used.findall(bf16_log), (log, bf16_log)


@pytest.mark.skipif(not gluon_available() or not sm90(), reason="needs a CUDA sm_90 GPU")
@pytest.mark.parametrize(
    ("n", "causal", "dtype", "heads"),
    [(128, True, "bfloat16", 2), (1024, True, "bfloat16", 3), (1024, False, "float16", 2), (640, False, "bfloat16", 2)],
)
def test_matches_fp32_attention_within_sdpa_error(n, causal, dtype, heads):
    import torch
    from profiler_kit.workloads import flash_gluon_bwd128 as g
    from profiler_kit.workloads import flash_triton as ft

    d = 128
    gen = torch.Generator(device="cuda").manual_seed(n + heads)
    dt = getattr(torch, dtype)
    q, k, v, do = (torch.randn(1, heads, n, d, device="cuda", dtype=dt, generator=gen) for _ in range(4))
    ref, want = sdpa_reference(q, k, v, do, causal)
    q3, k3, v3, do3 = (t.view(heads, n, d) for t in (q, k, v, do))
    o, lse = ft.forward_kernels(q3, k3, v3, causal)
    assert g.supported(q3)
    for config in g.CONFIGS:
        for _ in range(2):  # the first launch compiles, the second calls the compiled kernel directly
            ft.BWD_GLUON128, kept = config, ft.BWD_GLUON128
            try:
                assert ft._gluon_ws(q3) is g
                got = ft.backward_kernels(do3, q3, k3, v3, o, lse, causal, "gluon_ws")
            finally:
                ft.BWD_GLUON128 = kept
        for name, x, r, w in zip("qkv", got, ref, want, strict=True):
            err = ((x.float().view(r.shape) - r.grad).norm() / r.grad.norm()).item()
            assert math.isfinite(err) and err <= 1.5 * w + 1e-4, (config, f"d{name}", err, w)


@pytest.mark.skipif(not gluon_available() or not sm90(), reason="needs a CUDA sm_90 GPU")
@pytest.mark.parametrize(("causal", "kv_heads"), [(True, 2), (False, 1), (True, 4)])
@pytest.mark.parametrize("split", [False, True])
def test_grouped_query_heads_match_fp32_attention(causal, kv_heads, split, monkeypatch):
    """dK, dV of a shared K/V head are the sums over its query heads (one program loops over them, or with
    ``SPLIT_GQA`` one program per query head and an fp32 sum after)."""
    import torch
    from profiler_kit.workloads import flash_gluon_bwd128 as g
    from profiler_kit.workloads import flash_triton as ft

    heads, n, d = 4, 1024, 128
    gen = torch.Generator(device="cuda").manual_seed(kv_heads + causal)
    q, do = (torch.randn(1, heads, n, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    k, v = (torch.randn(1, kv_heads, n, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    ref, want = sdpa_reference(q, k, v, do, causal)
    q3, do3 = q.view(heads, n, d), do.view(heads, n, d)
    k3, v3 = k.view(kv_heads, n, d), v.view(kv_heads, n, d)
    o, lse = ft.forward_kernels(q3, k3, v3, causal)
    monkeypatch.setattr(ft, "BWD_GLUON128_GQA", True)
    monkeypatch.setattr(g, "SPLIT_GQA", {"causal": split, "full": split})
    launched, dkdv = [], g.dkdv
    monkeypatch.setattr(g, "dkdv", lambda *args, **kw: launched.append(dkdv(*args, **kw)))
    for _ in range(2):  # the first launch compiles, the second calls the compiled kernel directly
        got = ft.backward_kernels(do3, q3, k3, v3, o, lse, causal, "gluon_ws")
    assert len(launched) == 2  # the Gluon kernel, not the ``tma`` fallback
    for name, x, r, w in zip("qkv", got, ref, want, strict=True):
        err = ((x.float().view(r.shape) - r.grad).norm() / r.grad.norm()).item()
        assert math.isfinite(err) and err <= 1.5 * w + 1e-4, (f"d{name}", err, w)
