"""The warp-specialized Gluon forward (workloads/flash_gluon_fwd.py, issue 26).

Without a GPU: every config compiles for sm_90 offline (Triton ships ptxas) with no spills and no serialized
wgmma, O stored by TMA where the config says so. On a CUDA sm_90 GPU: O and L against fp32 math attention, within
SDPA's own error on the same inputs, causal or not, head dims 64 and 128, grouped-query heads.
"""

from __future__ import annotations

import importlib.util
import math
import re

import pytest

from tests.gluon_helpers import gluon_available, ptxas_spills, sm90

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")


@pytest.mark.skipif(not gluon_available(), reason="triton without Gluon")
@pytest.mark.parametrize(
    ("config", "causal", "dtype"),
    [("n128", True, "bfloat16"), ("n128_pingpong", True, "bfloat16"), ("n128_s3_pingpong", True, "bfloat16"),
     ("n128_pingpong_persist", True, "bfloat16"), ("n128_pingpong_persist", False, "bfloat16"),
     ("n128_s3_pingpong_persist", True, "bfloat16"), ("n128_fa3_persist", False, "bfloat16"),
     ("n128_pingpong_tmao", True, "bfloat16"), ("n128_pingpong_tmao", False, "float16"),
     ("n128_pingpong_persist_tmao", True, "float16"), ("n128_pingpong_persist_tmao", False, "bfloat16"),
     ("n128_pingpong_pipe", True, "bfloat16"), ("n128_pingpong_pipe", False, "float16"),
     ("n128_fa3_pipe", True, "float16"), ("n128_fa3_pipe", False, "bfloat16")],
)  # fmt: skip
def test_compiles_for_sm90_without_spills(tmp_path, config, causal, dtype):
    import torch
    from profiler_kit.workloads import flash_gluon_fwd as g

    compiled = g.compile_sm90(config, n=1024, d=128, is_causal=causal, dtype=getattr(torch, dtype))
    ptx = compiled.asm["ptx"]
    regs = {int(x) for x in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)}
    assert 24 in regs and 240 in regs, regs  # the load warp gives registers to the consumers
    assert compiled.metadata.shared < 227 * 1024, compiled.metadata.shared
    tma_o = bool(g.CONFIGS[config][7:8] == (True,))
    # O by a TMA store from shared memory, or by plain stores (tens a consumer; L's are a few)
    assert ("cp.async.bulk.tensor.2d.global.shared" in ptx) == tma_o
    stores = len(re.findall(r"\bst\.global\.", ptx))
    assert (stores < 16) == tma_o, stores
    spills, log = ptxas_spills(ptx, tmp_path)
    assert spills and max(spills) == 0, log
    assert "C7517" not in log, log  # no wait for a product in flight injected by ptxas (the pipelined programs')


@pytest.mark.skipif(not gluon_available(), reason="triton without Gluon")
@pytest.mark.parametrize(
    ("config", "causal", "dtype"), [("d256_pingpong", True, "bfloat16"), ("d256_fa3", False, "float16")]
)
def test_head_dim_256_configs_compile_for_sm90_without_spills(tmp_path, config, causal, dtype):
    """At d 256 (O alone takes 128 registers a consumer thread) the 64-key configs fit 227 KB and registers."""
    import torch
    from profiler_kit.workloads import flash_gluon_fwd as g

    compiled = g.compile_sm90(config, n=1024, d=256, is_causal=causal, dtype=getattr(torch, dtype))
    assert compiled.metadata.shared <= g.SHARED_MEMORY, compiled.metadata.shared
    spills, log = ptxas_spills(compiled.asm["ptx"], tmp_path)
    assert spills and max(spills) == 0, log


@pytest.mark.skipif(not gluon_available(), reason="triton without Gluon")
def test_configs_that_fit_each_head_dim():
    """``fits`` counts Q, the K/V ring and O's staging tiles: every config fits d 64 and 128 (the largest, 3 stages or
    a pipelined program's two Q tiles, 224 KB), only the 64-key 2-stage ones d 256; a config that does not fit is
    refused before it reaches the compiler."""
    import torch
    from profiler_kit.workloads import flash_gluon_fwd as g

    assert all(g.fits(c, 64) and g.fits(c, 128) for c in g.CONFIGS)
    assert [c for c in g.CONFIGS if g.fits(c, 256)] == ["d256_pingpong", "d256_fa3"]
    q = torch.empty(2, 256, 256, dtype=torch.bfloat16)
    lse = torch.empty(2, 256, dtype=torch.float32)
    with pytest.raises(ValueError, match="shared memory at d 256"):
        g.launch_args(q, q, q, q, lse, 0.1, True, "n128_pingpong")
    assert g.launch_args(q, q, q, q, lse, 0.1, True, "d256_pingpong")[0] == (4,)


@pytest.mark.skipif(not gluon_available(), reason="triton without Gluon")
def test_pipelined_config_needs_a_persistent_program_with_tma_stores():
    """A pipelined program (9th field) is persistent and stores O by TMA: a tuple asking for it otherwise is refused."""
    import torch
    from profiler_kit.workloads import flash_gluon_fwd as g

    q = torch.empty(4, 1024, 128, dtype=torch.bfloat16)
    lse = torch.empty(4, 1024, dtype=torch.float32)
    base = g.CONFIGS["n128_pingpong_pipe"]
    assert g.launch_args(q, q, q, q, lse, 0.1, True, base)[2][-2:] == (True, True)  # PIPELINE, PERSISTENT
    for bad in (base[:6] + (False, True, True), base[:6] + (True, False, True)):
        with pytest.raises(ValueError, match="pipelined"):
            g.launch_args(q, q, q, q, lse, 0.1, True, bad)


@pytest.mark.skipif(not gluon_available(), reason="triton without Gluon")
def test_persistent_grid_is_one_program_an_sm_at_most():
    """A persistent config launches min(work items, SMs) programs (each walks items ``pid + k programs``), the
    others one program per 128 query rows of a head."""
    import torch
    from profiler_kit.workloads import flash_gluon_fwd as g

    for heads, n, want in ((4, 1024, 32), (16, 4096, g.SMS_OFFLINE)):
        q = torch.empty(heads, n, 128, dtype=torch.bfloat16)
        lse = torch.empty(heads, n, dtype=torch.float32)
        grid, args, consts, _ = g.launch_args(q, q, q, q, lse, 0.1, False, "n128_pingpong_persist")
        assert grid == (want,) and args[-1] == heads and consts[-1] is True
        grid, _, consts, _ = g.launch_args(q, q, q, q, lse, 0.1, False, "n128_pingpong")
        assert grid == (n // 128 * heads,) and consts[-1] is False
    g.PERSISTENT_PROGRAMS, kept = 5, g.PERSISTENT_PROGRAMS
    try:
        assert g.launch_args(q, q, q, q, lse, 0.1, True, "n128_pingpong_persist")[0] == (5,)
    finally:
        g.PERSISTENT_PROGRAMS = kept


@pytest.mark.skipif(not gluon_available() or not sm90(), reason="needs a CUDA sm_90 GPU")
@pytest.mark.parametrize(("causal", "kv_heads", "programs"), [(True, 4, 5), (False, 2, 7), (True, 8, 3)])
def test_persistent_programs_walk_every_item(causal, kv_heads, programs, monkeypatch):
    """With fewer programs than work items (uneven causal items, grouped-query heads), each program walks several
    items through one K/V ring, Q tile and ping-pong turns: O and L those of the one-program-an-item kernel (the same
    products in the same order, up to the compiler's instruction choices)."""
    import torch
    from profiler_kit.workloads import flash_gluon_fwd as g

    heads, n, d = 8, 1024, 128
    gen = torch.Generator(device="cuda").manual_seed(programs)
    q = torch.randn(heads, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k, v = (torch.randn(kv_heads, n, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    want_o, want_l = torch.empty_like(q), torch.empty(heads, n, device="cuda", dtype=torch.float32)
    g.forward(q, k, v, want_o, want_l, d**-0.5, causal, "n128_pingpong")
    monkeypatch.setattr(g, "PERSISTENT_PROGRAMS", programs)
    for config in [c for c, x in g.CONFIGS.items() if len(x) > 6 and x[6]]:
        o, lse = torch.full_like(q, float("nan")), torch.full_like(want_l, float("nan"))
        g.forward(q, k, v, o, lse, d**-0.5, causal, config)
        torch.cuda.synchronize()
        torch.testing.assert_close(o, want_o, atol=2e-3, rtol=0, msg=lambda m, c=config: f"{c}: {m}")
        torch.testing.assert_close(lse, want_l, atol=1e-4, rtol=0, msg=lambda m, c=config: f"{c}: {m}")


@pytest.mark.skipif(not gluon_available() or not sm90(), reason="needs a CUDA sm_90 GPU")
@pytest.mark.parametrize(("d", "causal", "dtype", "kv_heads"), [(128, True, "bfloat16", 4), (128, False, "float16", 2),
                                                                (64, True, "bfloat16", 4), (64, False, "bfloat16", 1),
                                                                (256, True, "bfloat16", 2), (256, False, "float16", 4)])  # fmt: skip
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
    for config in [c for c in g.CONFIGS if g.fits(c, d)]:
        o = torch.empty_like(q)
        lse = torch.empty(heads, n, device="cuda", dtype=torch.float32)
        for _ in range(2):  # the first launch compiles, the second calls the compiled kernel directly
            g.forward(q.view(-1, n, d), k.view(-1, n, d), v.view(-1, n, d), o.view(-1, n, d), lse, d**-0.5, causal,
                      config)  # fmt: skip
        got = ((o.float() - ref_o).norm() / ref_o.norm()).item()
        assert got <= 1.5 * want + 1e-4, (config, got, want)
        torch.testing.assert_close(lse.view(1, heads, n), ref_l, atol=1e-2, rtol=0, msg=lambda m, c=config: f"{c}: {m}")


@pytest.mark.skipif(not gluon_available(), reason="triton without Gluon")
def test_tensor_desc_built_without_checks_equals_a_checked_one():
    """A descriptor of a (dtype, shape, strides, block) already checked skips TensorDescriptor's checks; its fields
    are those of a checked one, and a base off 16-byte alignment is still refused."""
    import torch
    from profiler_kit.workloads import gluon_tiles
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    x = torch.randn(3, 256, 128).to(torch.bfloat16)
    gluon_tiles._CHECKED.clear()
    first, again = gluon_tiles.tensor_desc(x, (64, 128)), gluon_tiles.tensor_desc(x, (64, 128))
    flat = x.view(-1, 128)
    want = TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [64, 128], first.layout)
    for desc in (first, again):
        assert type(desc) is TensorDescriptor
        assert (desc.shape, desc.strides, desc.block_shape, desc.padding) == ([768, 128], [128, 1], [64, 128], "zero")
        assert desc.layout == want.layout and desc.base.data_ptr() == flat.data_ptr()
    strided = torch.randn(256, 3, 128).to(torch.bfloat16).transpose(0, 1)  # no 2-D view: rows 384 apart
    with pytest.raises(RuntimeError):  # refused as before, not misread
        gluon_tiles.tensor_desc(strided, (64, 128))
    odd = torch.empty(768 * 128 + 1, dtype=torch.bfloat16)[1:].view(768, 128)
    with pytest.raises(ValueError, match="16-byte"):
        gluon_tiles.tensor_desc(odd, (64, 128))


@pytest.mark.skipif(not gluon_available() or not sm90(), reason="needs a CUDA sm_90 GPU")
def test_direct_launch_equals_tritons_launch():
    """Cached launches go straight to the C launcher, TMA descriptors with cached encodings
    (triton_launch._direct): the same outputs as Triton's own launch path, on fresh buffers too (O, L, dK, dV bit
    for bit; dQ is summed by TMA reduce-adds in no fixed order)."""
    import torch
    from profiler_kit.workloads import flash_triton as ft
    from profiler_kit.workloads import triton_launch as tl

    outs = {}
    for direct in (True, False):
        gen = torch.Generator(device="cuda").manual_seed(7)
        tl._PLANS.clear()
        tl._KEYED.clear()
        tl.DIRECT_LAUNCH, kept = direct, tl.DIRECT_LAUNCH
        try:
            runs = []
            for _ in range(3):  # the first launch compiles; later ones take the plan, new buffers each time
                q, k, v, do = (torch.randn(4, 512, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
                               for _ in range(4))  # fmt: skip
                o, lse = ft.forward_kernels(q, k, v, True)
                runs.append((o, lse, *ft.backward_kernels(do, q, k, v, o, lse, True, "gluon_ws")))
            plans = list(tl._PLANS.values())  # the Gluon forward and backward, the backward's Triton D kernel
            assert sum(bool(getattr(p[0].metadata, "tensordesc_meta", None)) for p in plans) == 2
            assert len(plans) == 3 and all(bool(p[2]) == direct for p in plans), [p[2] for p in plans]
        finally:
            tl.DIRECT_LAUNCH = kept
        outs[direct] = runs
    for mine, theirs in zip(outs[True], outs[False], strict=True):
        o, lse, dq, dk, dv = mine
        for x, y in zip((o, lse, dk, dv), (theirs[0], theirs[1], *theirs[3:]), strict=True):
            assert torch.equal(x, y)
        assert (dq.float() - theirs[2].float()).abs().max() <= 1e-2 * dq.float().abs().max()


@pytest.mark.skipif(not gluon_available() or not sm90(), reason="needs a CUDA sm_90 GPU")
@pytest.mark.parametrize("causal", [True, False])
def test_keyed_launches_replay_the_same_launch(causal):
    """A launch whose key (addresses, shapes, constants) was seen replays that launch's encoded arguments
    (triton_launch.launch_keyed): on the same buffers, no new entry and the built launch's outputs again, written
    anew over poisoned buffers (O, L, dK, dV bit for bit; dQ up to the order of its reduce-adds); on another
    buffer, a new entry."""
    import torch
    from profiler_kit.workloads import flash_gluon_bwd128, flash_gluon_fwd
    from profiler_kit.workloads import triton_launch as tl

    gen = torch.Generator(device="cuda").manual_seed(11)
    q, k, v, do = (torch.randn(4, 1024, 128, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    o, dk, dv = (torch.empty_like(q) for _ in range(3))
    lse, delta = (torch.empty(4, 1024, device="cuda", dtype=torch.float32) for _ in range(2))
    dq = torch.empty(q.shape, device="cuda", dtype=torch.float32)
    scale = 128**-0.5
    tl._KEYED.clear()
    runs, sizes = [], []
    for _ in range(3):
        for t in (o, lse, dk, dv):
            t.fill_(float("nan"))
        flash_gluon_fwd.forward(q, k, v, o, lse, scale, causal)
        torch.sum(o.float() * do.float(), -1, out=delta)  # every buffer the same each time
        dq.zero_()
        flash_gluon_bwd128.dkdv(q, k, v, do, dq, lse, delta, dk, dv, scale, causal)
        runs.append([t.clone() for t in (o, lse, dq, dk, dv)])
        sizes.append(len(tl._KEYED))
    assert sizes == [2, 2, 2], sizes  # the forward and the backward: built once, replayed after
    for run in runs[1:]:
        for name, x, y in zip(("o", "lse", "dk", "dv"), run[:2] + run[3:], runs[0][:2] + runs[0][3:], strict=True):
            assert torch.equal(x, y), name
        assert (run[2] - runs[0][2]).abs().max() <= 1e-3 * runs[0][2].abs().max()
    flash_gluon_fwd.forward(q, k, v, torch.empty_like(o), lse, scale, causal)  # another address: built
    assert len(tl._KEYED) == 3
