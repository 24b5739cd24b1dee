"""Attention workloads on the CPU: FlashAttention-2 (PyTorch and Triton) against a float64 reference."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from profiler_kit.workloads.attention import IMPLS, attention_naive, attention_step, get_impl
from profiler_kit.workloads.attention_bench import attention_flops
from profiler_kit.workloads.flash_pytorch import FlashAttention2PyTorch, flash_forward

from tests.attention_reference import reference_attention
from tests.gluon_helpers import gluon_available, ptxas_spills

ROOT = Path(__file__).resolve().parent.parent


def _inputs(shape, seed, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(shape, generator=gen).to(dtype).requires_grad_() for _ in range(3))
    return q, k, v, torch.randn(shape, generator=gen).to(dtype)


@pytest.mark.parametrize("seq", [16, 37, 100])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_pytorch_matches_reference(seq, causal):
    q, k, v, do = _inputs((2, seq, 32), seed=seq + causal)
    o = FlashAttention2PyTorch.apply(q, k, v, causal)
    o.backward(do)
    _, lse = flash_forward(q.detach(), k.detach(), v.detach(), causal)
    ref = reference_attention(q, k, v, causal, do)
    for name, got in [("o", o), ("L", lse), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)]:
        torch.testing.assert_close(got.double(), ref[name], atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


def test_flash_pytorch_saves_l_q_k_v_o_and_small_tiles():
    q, k, v, _ = _inputs((1, 2, 40, 16), seed=3)
    o = FlashAttention2PyTorch.apply(q, k, v, True)
    saved = o.grad_fn.saved_tensors
    assert [t.shape for t in saved] == [q.shape[:-1], q.shape, k.shape, v.shape, o.shape]
    assert torch.equal(saved[4], o.detach())
    with pytest.raises(ValueError, match="16x16"):
        flash_forward(q, k, v, tile_q=8)


def test_flash_pytorch_under_torch_compile():
    q, k, v, do = _inputs((1, 24, 16), seed=5)
    o = torch.compile(FlashAttention2PyTorch.apply, backend="eager")(q, k, v, True)
    o.backward(do)
    ref = reference_attention(q, k, v, True, do)
    torch.testing.assert_close(o.double(), ref["o"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(k.grad.double(), ref["dk"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_naive_and_sdpa_agree_with_reference(causal):
    q, k, v, do = _inputs((1, 2, 33, 16), seed=11)
    ref = reference_attention(q, k, v, causal, do)
    for impl in ("naive", "sdpa"):
        o = get_impl(impl)(q, k, v, causal)
        torch.testing.assert_close(o.double(), ref["o"], atol=1e-5, rtol=1e-5, msg=lambda m, i=impl: f"{i}: {m}")


def test_naive_records_course_nvtx_ranges():
    q, k, v, _ = _inputs((1, 8, 16), seed=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        attention_naive(q, k, v, True)
    names = {e.name for e in prof.events()}
    assert {"computing attention scores", "computing softmax", "final matmul"} <= names


def test_attention_step_runs_forward_and_backward_ranges():
    step = attention_step("flash_pytorch", 1, 2, 20, 16, torch.float32, True, "cpu")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    names = {e.name for e in prof.events()}
    assert {"forward", "backward"} <= names
    with pytest.raises(ValueError, match="unknown attention impl"):
        attention_step("nope", 1, 1, 16, 16, torch.float32, False, "cpu")
    assert set(IMPLS) == {"naive", "compiled", "flash_pytorch", "triton", "triton_atomic", "sdpa"}


def test_flop_convention():
    fwd, bwd = attention_flops(1, 16, 16384, 64, causal=True)
    assert fwd == 4 * 16 * 16384**2 * 64 / 2
    assert bwd == 2.5 * fwd


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")
def test_triton_kernels_in_interpreter():
    """Runs tests/attention_triton_cases.py with TRITON_INTERPRET=1 in a fresh process."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    cases = ROOT / "tests" / "attention_triton_cases.py"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(cases)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,  # the interpreter is slow: ~4 min for the whole file on a 2-core VM
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout


def test_side_by_side_table_speedups():
    from profiler_kit.workloads.attention_bench import side_by_side

    def row(impl, fwd, bwd, both):
        return {"impl": impl, "dtype": "bfloat16", "d_head": 128, "causal": True, "seq": 4096, "status": "ok",
                "fwd_ms": fwd, "bwd_ms": bwd, "fwd_bwd_ms": both, "fwd_tflops": 1.0, "bwd_tflops": 2.0,
                "fwd_bwd_tflops": 3.0}  # fmt: skip

    table = side_by_side([row("triton", 1.0, 2.0, 4.0), row("sdpa", 1.5, 1.0, 4.0)], "triton", "sdpa")
    last = table.splitlines()[-1]
    assert last.startswith("| bfloat16 | 128 | True | 4096 | 1.000 (1) / 2.000 (2) / 4.000 (3) |"), last
    assert last.endswith("| 1.50 / 0.50 / 1.00 |"), last
    oom = {"impl": "sdpa", "dtype": "bfloat16", "d_head": 128, "causal": True, "seq": 4096, "status": "oom"}
    assert side_by_side([row("triton", 1.0, 2.0, 4.0), oom], "triton", "sdpa").endswith("| oom | - |")


def test_sdpa_impl_groups_query_heads():
    """``sdpa`` with fewer K/V heads is grouped-query attention: equal to repeating each K/V head over its group."""
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, 4, 20, 16, generator=gen)
    k, v = (torch.randn(1, 2, 20, 16, generator=gen) for _ in range(2))
    got = get_impl("sdpa")(q, k, v, True)
    ref = reference_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), True, torch.zeros_like(q))
    torch.testing.assert_close(got.double(), ref["o"], atol=1e-5, rtol=1e-5)


def _cuda_sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


@pytest.mark.skipif(importlib.util.find_spec("triton") is None or not _cuda_sm90(), reason="needs a Hopper GPU")
@pytest.mark.parametrize(
    ("d", "causal", "dtype"),
    [(128, True, "bfloat16"), (64, False, "float16"), (64, True, "bfloat16"), (256, False, "bfloat16")],
)
def test_triton_gqa_on_gpu_within_sdpa_error(d, causal, dtype):
    """GQA (8 query heads on 2 K/V heads) on the default backward: errors against fp32 math attention at most
    1.5x SDPA's (``enable_gqa``) on the same inputs."""
    from profiler_kit.workloads.attention_bench import check_case

    got = check_case("triton", 2, 8, 1024, d, dtype, causal, kv_heads=2)
    want = check_case("sdpa", 2, 8, 1024, d, dtype, causal, kv_heads=2)
    for key in ("rel_err_o", "rel_err_dq", "rel_err_dk", "rel_err_dv"):
        assert got[key] <= 1.5 * want[key] + 1e-4, (key, got, want)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None or not _cuda_sm90(), reason="needs a Hopper GPU")
@pytest.mark.parametrize("causal", [True, False])
def test_triton_head_dim_256_on_gpu_within_sdpa_error(causal):
    """Head dim 256 (the Gluon forward and backward, ``flash_gluon_bwd256``): errors against fp32 math attention at
    most 1.5x SDPA's on the same inputs."""
    from profiler_kit.workloads import flash_gluon_bwd256
    from profiler_kit.workloads import flash_triton as ft
    from profiler_kit.workloads.attention_bench import check_case

    assert ft._gluon_ws(torch.empty(4, 1024, 256, device="cuda", dtype=torch.bfloat16)) is flash_gluon_bwd256
    got = check_case("triton", 1, 4, 1024, 256, "bfloat16", causal)
    want = check_case("sdpa", 1, 4, 1024, 256, "bfloat16", causal)
    for key in ("rel_err_o", "rel_err_dq", "rel_err_dk", "rel_err_dv"):
        assert got[key] <= 1.5 * want[key] + 1e-4, (key, got, want)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None or not gluon_available(), reason="needs triton (Gluon)")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("kind", ["fwd", "dkdv", "dq"])
def test_head_dim_256_tiles_fit_hopper_shared_memory(tmp_path, kind, dtype):
    """At head dim 256 each Triton kernel keeps a tile that fits an H100's or H200's 227 KB of shared memory and
    assembles without spills (the backward's d 64/128 tiles need up to 545 KB there: every trial failed, so a d 256
    backward raised OutOfResources on the GPU)."""
    from profiler_kit.workloads import flash_triton as ft
    from profiler_kit.workloads import gluon_tiles
    from triton.tools.tensor_descriptor import TensorDescriptor

    bh, n, d = 2, 4096, 256
    q = torch.empty(bh, n, d, dtype=dtype)
    lse = torch.empty(bh, n, dtype=torch.float32)
    dq = torch.empty(bh, n, d, dtype=torch.float32)
    kernel, configs, consts = {
        "fwd": (ft._flash_fwd_kernel, ft.FWD_CONFIGS, {"TMA": False, "HEAD_GROUP": 2}),
        "dkdv": (
            ft._flash_bwd_dkdv_kernel,
            ft.DKDV_CONFIGS,
            {"DQ_MODE": 2, "HEAD_GROUP": 1, "QDO_TMA": False, "REORDER": False, "SCALE_DS": False},
        ),
        "dq": (ft._flash_bwd_dq_kernel, ft.DQ_CONFIGS, {}),
    }[kind]
    consts = {"HEAD_DIM": d, "IS_CAUSAL": True, "GQA": 1, **consts}
    kept = ft._prune(configs, {"N_CTX": n, "Q": q}, **consts)
    assert kept
    shared = []
    for config in kept:
        dq_desc = TensorDescriptor(dq, [bh * n, d], [d, 1], [config.kwargs["BLOCK_M"], d])
        args = {
            "fwd": (q,) * 6 + (lse, 0.1, n),
            "dkdv": (q,) * 8 + (dq, dq_desc, lse, lse, 0.1, n),
            "dq": (q,) * 5 + (lse, lse, 0.1, n),
        }[kind]
        tile = {**consts, **config.kwargs, "EVEN": True}
        pointers = [name for name, a in zip(kernel.arg_names, args, strict=False) if isinstance(a, torch.Tensor)]
        compiled = gluon_tiles.compile_sm90(
            kernel, args, tuple(tile[n] for n in kernel.arg_names[len(args) :]),
            {"num_warps": config.num_warps, "num_stages": config.num_stages}, pointers,
        )  # fmt: skip
        shared.append(compiled.metadata.shared)
        if shared[-1] <= gluon_tiles.SHARED_MEMORY and max(ptxas_spills(compiled.asm["ptx"], tmp_path)[0]) == 0:
            break
    else:
        pytest.fail(f"no tile fits without spills: shared memory {shared}")


def test_implementations_take_turns_and_each_gets_its_own_median():
    """Rounds rotate the order, so neither implementation always runs first (the cool GPU's turn)."""
    from profiler_kit.workloads.attention_bench import time_interleaved

    calls = []

    def bench(fn, warmup, rep, grad_to_none, return_mode):
        calls.append((fn(), warmup, rep))
        return {"a": [1.0, 2.0], "b": [5.0, 7.0], "c": [3.0, 3.0]}[fn()]

    got = time_interleaved({"a": lambda: "a", "b": lambda: "b", "c": lambda: "c"}, 10, 60, 3, bench=bench)
    assert [c[0] for c in calls] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert [c[1] for c in calls] == [10] * 3 + [1] * 6  # the warm-up once, in the first round
    assert {c[2] for c in calls} == {20}
    assert got == {"a": 1.5, "b": 6.0, "c": 3.0}


@pytest.mark.skipif(importlib.util.find_spec("triton") is None or not _cuda_sm90(), reason="needs a Hopper GPU")
def test_bench_case_times_every_implementation_and_names_the_one_that_fails(monkeypatch):
    """Taking turns keeps each implementation's own row; one that fails is a row with its error, the rest timed."""
    from profiler_kit.workloads import attention_bench

    real = attention_bench.get_impl

    def get_impl(name):
        if name == "naive":
            return lambda *a: (_ for _ in ()).throw(RuntimeError("broken on purpose"))
        return real(name)

    monkeypatch.setattr(attention_bench, "get_impl", get_impl)
    rows = attention_bench.bench_case(
        ["triton", "naive", "sdpa"], 1, 4, 1024, 128, "bfloat16", True, warmup=1, rep=10, rounds=2
    )
    assert [r["impl"] for r in rows] == ["triton", "naive", "sdpa"]
    assert rows[1]["status"] == "error" and "broken on purpose" in rows[1]["error"]
    for r in (rows[0], rows[2]):
        assert r["status"] == "ok" and r["rounds"] == 2
        assert 0 < r["fwd_ms"] < r["fwd_bwd_ms"] and r["bwd_ms"] > 0 and r["mem_before_bwd_bytes"] > 0


@pytest.mark.skipif(importlib.util.find_spec("triton") is None or not _cuda_sm90(), reason="needs a Hopper GPU")
@pytest.mark.parametrize(("d", "dtype"), [(128, torch.float16), (128, torch.bfloat16), (64, torch.float16)])
def test_backward_of_sum_on_gpu_equals_backward_of_ones(d, dtype):
    """``o.sum()``'s expanded dO (read once a program by the D kernel) gives the gradients of a contiguous dO."""
    from profiler_kit.workloads.attention import make_inputs
    from profiler_kit.workloads.flash_triton import flash_attention_triton

    q, k, v = make_inputs(1, 4, 1024, d, dtype, "cuda")
    flash_attention_triton(q, k, v, True).sum().backward()
    got = [t.grad.clone() for t in (q, k, v)]
    q.grad = k.grad = v.grad = None
    o = flash_attention_triton(q, k, v, True)
    o.backward(torch.ones_like(o))
    for g, t in zip(got, (q, k, v), strict=True):  # dQ's fp32 reduce-adds may come in another order
        torch.testing.assert_close(g, t.grad)
