"""The warp-specialized Gluon backward at head dim 256 (workloads/flash_gluon_bwd256.py).

Without a GPU: every config compiles for sm_90 offline (Triton ships ptxas), causal or not, with grouped-query
heads, with no serialized wgmma and at most a few spilled scalars. On a CUDA sm_90 GPU: dQ, dK, dV of ``dkdv``
(called directly, after ``flash_triton.forward_kernels``) against fp32 math attention, within SDPA's own error on
the same inputs, causal or not, bf16 and fp16; grouped-query heads likewise. Without a GPU too: the three Gluon
backwards launch what their ``launch_args`` build, under keys that repeat for the same buffers, and
``flash_triton._gluon_ws`` routes head groups.
"""

from __future__ import annotations

import importlib.util
import math
import re

import pytest

from tests.gluon_helpers import gluon_available, ptxas_spills, sdpa_reference, sm90

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")

CONFIG_NAMES = ("d256", "d256_ahead", "d256_ahead_dq2", "d256_dq128", "d256_p1", "d256_s2")


@pytest.mark.skipif(not gluon_available(), reason="triton without Gluon")
def test_config_names_and_launch_args():
    import torch
    from profiler_kit.workloads import flash_gluon_bwd256 as g

    assert set(CONFIG_NAMES) == set(g.CONFIGS) and g.DEFAULT in g.CONFIGS
    q = torch.empty(8, 640, 256, dtype=torch.bfloat16)
    k = torch.empty(2, 640, 256, dtype=torch.bfloat16)
    lse = torch.empty(8, 640)
    grid, args, consts, opts = g.launch_args(q, k, k, q, q.float(), lse, lse, k, k, 0.0625, True, "d256")
    assert grid == (640 // 64 * 2,)  # a program per 64 keys of a K/V head (1-D: the kernel reads program_id(1) as 0)
    assert consts[-1] == 4 and opts == {"num_warps": 4, "maxnreg": 168}  # a program loops over 4 query heads
    assert not g.supported(q)  # not on a GPU
    q, k, lse = q[:, :96].contiguous(), k[:, :96].contiguous(), lse[:, :96].contiguous()
    with pytest.raises(ValueError, match="multiple of 64"):
        g.launch_args(q, k, k, q, q.float(), lse, lse, k, k, 0.0625, False, "d256")


@pytest.mark.skipif(not gluon_available(), reason="triton without Gluon")
@pytest.mark.parametrize(
    ("config", "causal", "kv_heads", "dtype"),
    [(c, causal, 2, "bfloat16") for c in CONFIG_NAMES for causal in (True, False)]
    + [("d256", True, 0, "float16"), ("d256", False, 0, "float16")],  # fp16: the same registers and spills as bf16
)
def test_compiles_for_sm90(tmp_path, config, causal, kv_heads, dtype):
    import torch
    from profiler_kit.workloads import flash_gluon_bwd256 as g
    from profiler_kit.workloads import gluon_tiles

    dt = getattr(torch, dtype)
    compiled = g.compile_sm90(config, n=1024, is_causal=causal, dtype=dt, heads=4, kv_heads=kv_heads)
    ptx = compiled.asm["ptx"]
    regs = {int(x) for x in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)}
    assert 24 in regs and 240 in regs, regs  # the load warp gives registers to the consumers
    assert compiled.metadata.shared < gluon_tiles.SHARED_MEMORY, compiled.metadata.shared
    assert "cp.reduce.async.bulk.tensor" in ptx  # dQ added by TMA reduce
    spills, log = ptxas_spills(ptx, tmp_path)
    # 0 bytes, but 8-16 in the DQ_AHEAD configs causal with head groups (the masked tile's copy in the heads' loop);
    # without the opaque K/V index one consumer spilled ~230 bytes of wgmma descriptors
    assert spills and max(spills) <= 16, log
    if dt != torch.bfloat16:
        bf16 = g.compile_sm90(config, n=1024, is_causal=causal, heads=4, kv_heads=kv_heads)
        bf16_spills, bf16_log = ptxas_spills(bf16.asm["ptx"], tmp_path)
        assert (spills, compiled.metadata.shared) == (bf16_spills, bf16.metadata.shared)
        used = re.compile(r"Used (\d+) registers")
        assert used.findall(log) == used.findall(bf16_log), (log, bf16_log)


def _check_against_fp32(heads, kv_heads, n, causal, dtype, seed):
    """dQ, dK, dV of every config against fp32 math attention, each within 1.5x SDPA's own error."""
    import torch
    from profiler_kit.workloads import flash_gluon_bwd256 as g
    from profiler_kit.workloads import flash_triton as ft

    d = 256
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dt = getattr(torch, dtype)
    q, do = (torch.randn(1, heads, n, d, device="cuda", dtype=dt, generator=gen) for _ in range(2))
    k, v = (torch.randn(1, kv_heads, n, d, device="cuda", dtype=dt, generator=gen) for _ in range(2))
    ref, want = sdpa_reference(q, k, v, do, causal)
    q3, do3 = q.view(heads, n, d), do.view(heads, n, d)
    k3, v3 = k.view(kv_heads, n, d), v.view(kv_heads, n, d)
    o, lse = ft.forward_kernels(q3, k3, v3, causal)
    assert g.supported(q3)
    # as flash_triton.backward_kernels: D = rowsum(dO O) in fp32, dQ added into zeroed fp32, sm_scale 1/sqrt(d)
    delta = (do3.float() * o.float()).sum(-1)
    dq = torch.zeros(q3.shape, dtype=torch.float32, device="cuda")
    dk, dv = torch.empty_like(k3), torch.empty_like(v3)
    for config in g.CONFIGS:
        for _ in range(2):  # the first launch compiles, the second calls the compiled kernel directly
            dq.zero_()
            dk.fill_(float("nan"))
            dv.fill_(float("nan"))
            g.dkdv(q3, k3, v3, do3, dq, lse, delta, dk, dv, 1.0 / math.sqrt(d), causal, config)
        for name, x, r, w in zip("qkv", (dq, dk, dv), ref, want, strict=True):
            err = ((x.float().view(r.shape) - r.grad).norm() / r.grad.norm()).item()
            assert math.isfinite(err) and err <= 1.5 * w + 1e-4, (config, f"d{name}", err, w)


@pytest.mark.skipif(not gluon_available() or not sm90(), reason="needs a CUDA sm_90 GPU")
@pytest.mark.parametrize(
    ("n", "causal", "dtype", "heads"),
    [
        (64, True, "bfloat16", 2),
        (64, False, "float16", 2),
        (1024, True, "bfloat16", 3),
        (1024, False, "bfloat16", 2),
        (1024, True, "float16", 2),
        (1024, False, "float16", 2),
        (640, True, "bfloat16", 2),
        (640, False, "bfloat16", 2),
    ],  # fmt: skip
)
def test_matches_fp32_attention_within_sdpa_error(n, causal, dtype, heads):
    _check_against_fp32(heads, heads, n, causal, dtype, seed=n + heads)


@pytest.mark.skipif(not gluon_available() or not sm90(), reason="needs a CUDA sm_90 GPU")
@pytest.mark.parametrize(
    ("causal", "kv_heads", "n"), [(True, 2, 1024), (False, 1, 1024), (True, 1, 640), (False, 2, 64)]
)
def test_grouped_query_heads_match_fp32_attention(causal, kv_heads, n):
    """dK, dV of a shared K/V head are the sums over its query heads (one program loops over them)."""
    _check_against_fp32(4, kv_heads, n, causal, "bfloat16", seed=kv_heads + causal)


@pytest.mark.skipif(not gluon_available(), reason="triton without Gluon")
@pytest.mark.parametrize("module", ["flash_gluon_ws", "flash_gluon_bwd128", "flash_gluon_bwd256"])
def test_each_backward_launches_what_its_launch_args_build(module, monkeypatch):
    """The Gluon backwards' shared launcher (``gluon_tiles.launch_backward``): the launch its module's ``launch_args``
    builds, under a key that repeats for the same buffers and changes with any of them."""
    import importlib

    import torch
    from profiler_kit.workloads import gluon_tiles

    g = importlib.import_module(f"profiler_kit.workloads.{module}")
    d = getattr(g, "HEAD_DIM", 64)  # flash_gluon_ws: head dim 64
    launched = []
    monkeypatch.setattr(gluon_tiles, "launch_keyed", lambda key, kernel, build: launched.append((key, kernel, build)))
    q, k, v, do = (torch.empty(2, 256, d, dtype=torch.bfloat16) for _ in range(4))
    dq = torch.empty(2, 256, d)
    lse, delta = torch.empty(2, 256), torch.empty(2, 256)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    call = (q, k, v, do, dq, lse, delta, dk, dv, 0.125, True, g.DEFAULT)
    g.dkdv(*call)
    g.dkdv(*call)
    g.dkdv(q, k, v, do, dq, lse, delta, dk, torch.empty_like(v), 0.125, True, g.DEFAULT)
    (key, kernel, build), (again, *_), (other, *_) = launched
    assert key == again and key != other
    grid, args, consts = build()
    want_grid, want_args, want_consts, opts = g.launch_args(*call)

    def seen(a):  # what a launch reads of an argument: a tensor's or a descriptor's memory and layout, or the value
        if isinstance(a, torch.Tensor):
            return a.data_ptr(), a.shape
        if hasattr(a, "base"):
            return a.base.data_ptr(), tuple(a.shape), tuple(a.strides), tuple(a.block_shape)
        return a

    assert grid == want_grid and list(map(seen, args)) == list(map(seen, want_args))
    assert [consts[name] for name in kernel.arg_names[len(args) :]] == list(want_consts)
    assert {name: consts[name] for name in opts} == opts


@pytest.mark.skipif(not gluon_available(), reason="triton without Gluon")
def test_which_gluon_backward_takes_grouped_heads(monkeypatch):
    """``flash_triton._gluon_ws``: the d 64 kernel takes no head groups, the d 128 one where ``BWD_GLUON128_GQA``
    is on, the d 256 one always; a head dim without a Gluon backward gets none (the ``tma`` kernel)."""
    import torch
    from profiler_kit.workloads import flash_triton as ft

    modules = ft._gluon_modules(ft.GLUON_WS_TRITON)
    if modules is None:
        pytest.skip("another Triton release: no Gluon backward")
    ws, bwd128, bwd256 = modules[1:]
    for mod, d in ((ws, 64), (bwd128, 128), (bwd256, 256)):  # as on a Hopper GPU, by head dim alone
        monkeypatch.setattr(mod, "supported", lambda q, d=d: q.shape[-1] == d)
    q = {d: torch.empty(2, 128, d) for d in (32, 64, 128, 256)}
    assert [ft._gluon_ws(q[d]) for d in (32, 64, 128, 256)] == [None, ws, bwd128, bwd256]
    assert [ft._gluon_ws(q[d], grouped=True) for d in (32, 64, 128, 256)] == [None, None, bwd128, bwd256]
    monkeypatch.setattr(ft, "BWD_GLUON128_GQA", False)
    assert ft._gluon_ws(q[128], grouped=True) is None and ft._gluon_ws(q[128]) is bwd128
    monkeypatch.setattr(ft, "BWD_GLUON256", None)
    assert ft._gluon_ws(q[256]) is None
