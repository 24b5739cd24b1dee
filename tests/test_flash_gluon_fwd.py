"""The warp-specialized Gluon forward (workloads/flash_gluon_fwd.py, issue 26).

Without a GPU: every config compiles for sm_90 offline (Triton ships ptxas) with no spills and no serialized
wgmma. On a CUDA sm_90 GPU: O and L against fp32 math attention, within SDPA's own error on the same inputs,
causal or not, head dims 64 and 128, grouped-query heads.
"""

from __future__ import annotations

import importlib.util
import math
import re

import pytest

from tests.gluon_helpers import gluon_available, ptxas_spills, sm90

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")


@pytest.mark.skipif(not gluon_available(), reason="triton without Gluon")
@pytest.mark.parametrize("config", ["n128", "n128_pingpong", "n128_s3_pingpong"])
def test_compiles_for_sm90_without_spills(tmp_path, config):
    from profiler_kit.workloads import flash_gluon_fwd as g

    compiled = g.compile_sm90(config, n=1024, d=128, is_causal=True)
    ptx = compiled.asm["ptx"]
    regs = {int(x) for x in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)}
    assert 24 in regs and 240 in regs, regs  # the load warp gives registers to the consumers
    assert compiled.metadata.shared < 227 * 1024, compiled.metadata.shared
    spills, log = ptxas_spills(ptx, tmp_path)
    assert spills and max(spills) == 0, log


@pytest.mark.skipif(not gluon_available() or not sm90(), reason="needs a CUDA sm_90 GPU")
@pytest.mark.parametrize(("d", "causal", "dtype", "kv_heads"), [(128, True, "bfloat16", 4), (128, False, "float16", 2),
                                                                (64, True, "bfloat16", 4), (64, False, "bfloat16", 1)])  # fmt: skip
def test_matches_fp32_attention_within_sdpa_error(d, causal, dtype, kv_heads):
    import torch
    from profiler_kit.workloads import flash_gluon_fwd as g

    heads, n = 4, 1024
    gen = torch.Generator(device="cuda").manual_seed(d + causal)
    dt = getattr(torch, dtype)
    q = torch.randn(1, heads, n, d, device="cuda", dtype=dt, generator=gen)
    k, v = (torch.randn(1, kv_heads, n, d, device="cuda", dtype=dt, generator=gen) for _ in range(2))
    group = heads // kv_heads
    kr, vr = (t.float().repeat_interleave(group, 1) for t in (k, v))
    s = q.float() @ kr.transpose(-1, -2) / math.sqrt(d)
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    ref_o, ref_l = torch.softmax(s, -1) @ vr, torch.logsumexp(s, -1)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=group > 1)
    want = ((sdpa.float() - ref_o).norm() / ref_o.norm()).item()
    for config in g.CONFIGS:
        o = torch.empty_like(q)
        lse = torch.empty(heads, n, device="cuda", dtype=torch.float32)
        for _ in range(2):  # the first launch compiles, the second calls the compiled kernel directly
            g.forward(q.view(-1, n, d), k.view(-1, n, d), v.view(-1, n, d), o.view(-1, n, d), lse, d**-0.5, causal,
                      config)  # fmt: skip
        got = ((o.float() - ref_o).norm() / ref_o.norm()).item()
        assert got <= 1.5 * want + 1e-4, (config, got, want)
        torch.testing.assert_close(lse.view(1, heads, n), ref_l, atol=1e-2, rtol=0, msg=lambda m, c=config: f"{c}: {m}")
