"""The warp-specialized Gluon forward (workloads/flash_gluon_fwd.py, issue 26).

Without a GPU: every config compiles for sm_90 offline (Triton ships ptxas) with no spills and no serialized
wgmma. On a CUDA sm_90 GPU: O and L against fp32 math attention, within SDPA's own error on the same inputs,
causal or not, head dims 64 and 128, grouped-query heads.
"""

from __future__ import annotations

import importlib.util
import math
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")


def _gluon_available() -> bool:
    try:
        import triton.experimental.gluon.language  # noqa: F401
    except ImportError:
        return False
    return True


def _sm90() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


@pytest.mark.skipif(not _gluon_available(), reason="triton without Gluon")
@pytest.mark.parametrize("config", ["n128", "n128_pingpong", "n128_s3_pingpong"])
def test_compiles_for_sm90_without_spills(tmp_path, config):
    import triton
    from profiler_kit.workloads import flash_gluon_fwd as g

    compiled = g.compile_sm90(config, n=1024, d=128, is_causal=True)
    ptx = compiled.asm["ptx"]
    regs = {int(x) for x in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)}
    assert 24 in regs and 240 in regs, regs  # the load warp gives registers to the consumers
    assert compiled.metadata.shared < 227 * 1024, compiled.metadata.shared
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not ptxas.exists():
        pytest.skip("ptxas not shipped with this triton")
    (tmp_path / "k.ptx").write_text(ptx)
    out = subprocess.run(
        [ptxas, "-arch=sm_90a", "-v", tmp_path / "k.ptx", "-o", tmp_path / "k.cubin"], capture_output=True, text=True
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill stores", out.stderr)]
    assert spills and max(spills) == 0, out.stderr[-2000:]
    assert "C7512" not in out.stderr and "C7515" not in out.stderr, out.stderr[-2000:]  # wgmma not serialized


@pytest.mark.skipif(not _gluon_available() or not _sm90(), reason="needs a CUDA sm_90 GPU")
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
