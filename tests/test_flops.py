"""profiler_kit.analyze.flops: analytic FLOPs and AdamW bytes against instrumented CPU runs of the tiny model."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from profiler_kit.analyze.flops import (
    ADAMW_ACCESSES_PER_ELEMENT,
    ADAMW_KERNELS_PER_TENSOR,
    adamw_bytes,
    forward_flops,
    gemm_peak_key,
    kernel_time_in_ranges,
    parameter_tensors,
    step_flops,
)
from profiler_kit.workloads.models import VOCAB, AdamW, RunSpec, TransformerLM, count_parameters, model_config
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode


def _model(batch: int, ctx: int):
    spec = RunSpec(size="tiny", ctx=ctx, batch=batch, device="cpu")
    torch.manual_seed(0)
    return TransformerLM("tiny", ctx, device="cpu"), torch.randint(0, VOCAB, (batch, ctx)), model_config(spec)


@pytest.mark.parametrize("batch,ctx", [(2, 16), (1, 8), (3, 5)])
def test_forward_and_backward_flops_equal_flop_counter(batch, ctx):
    model, tokens, cfg = _model(batch, ctx)
    with FlopCounterMode(display=False) as fwd:
        logits = model(tokens)
    counts = {str(k): v for k, v in fwd.get_flop_counts()["Global"].items()}
    expected = forward_flops(cfg)
    # linear layers run as aten.mm, QK^T and PV as aten.bmm: the split is checked, not only the total
    assert counts == {"aten.mm": expected["gemm"], "aten.bmm": expected["attention"]}
    assert fwd.get_total_flops() == expected["total"]
    with FlopCounterMode(display=False) as both:
        model(tokens).float().sum().backward()
    assert both.get_total_flops() == step_flops(cfg, "train")["total"] == 3 * expected["total"]
    assert step_flops(cfg, "forward") == expected
    assert logits.shape == (batch, ctx, VOCAB)


def test_parameter_count_matches_the_model():
    model, _, cfg = _model(1, 8)
    assert parameter_tensors(cfg) == (len(list(model.parameters())), count_parameters(model))


class _Accesses(TorchDispatchMode):
    """Per aten op: bytes of its tensor operands (inputs read, outputs written) of a given numel."""

    def __init__(self, numel: int):
        super().__init__()
        self.numel, self.ops, self.bytes = numel, 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        big = [
            t
            for t in tree_leaves((args, kwargs or {})) + tree_leaves(out)
            if isinstance(t, torch.Tensor) and t.numel() == self.numel
        ]
        if big:
            self.ops += 1
            self.bytes += sum(t.numel() * t.element_size() for t in big)
        return out


def test_adamw_bytes_equal_the_operands_of_its_ops():
    p = torch.nn.Parameter(torch.randn(1000))
    opt = AdamW([p], lr=1e-3)
    p.grad = torch.randn(1000)
    opt.step()  # the first step also creates the moments; the steady state is what a trace shows
    with _Accesses(1000) as acc:
        opt.step()
    assert acc.ops == ADAMW_KERNELS_PER_TENSOR
    assert acc.bytes == ADAMW_ACCESSES_PER_ELEMENT * 4 * 1000
    _, _, cfg = _model(1, 8)
    assert adamw_bytes(cfg) == ADAMW_ACCESSES_PER_ELEMENT * 4 * parameter_tensors(cfg)[1]


def test_kernel_time_in_ranges_counts_every_thread_of_the_process():
    # range 0 on thread 1 [0, 100]; range 1 [200, 300]; a range of another process [0, 1000]
    ranges = pd.DataFrame(
        {"start_ns": [0, 200, 0], "end_ns": [100, 300, 1000], "pid": [7, 7, 8], "tid": [1, 1, 1], "end_tid": -1}
    )
    ops = pd.DataFrame(
        {
            "is_kernel": [True, True, True, False, True],
            "category": pd.Categorical(["gemm", "gemm", "elementwise", "memory", "gemm"]),
            "duration_ns": [10, 20, 40, 80, 160],
        }
    )
    launched = pd.DataFrame(
        {
            "op_row": [0, 1, 2, 3, 4],
            "pid": [7, 7, 7, 7, 7],
            "tid": [1, 2, 1, 1, 2],  # op 1 from another thread (autograd's), still inside range 0
            "launch_start_ns": [10, 50, 60, 70, 250],
            "launch_end_ns": [15, 55, 65, 75, 260],
        }
    )
    gemm = kernel_time_in_ranges(ranges, ops, launched, ["gemm"])
    assert gemm["kernel_ns"].tolist() == [30, 160, 0] and gemm["kernels"].tolist() == [2, 1, 0]
    every = kernel_time_in_ranges(ranges, ops, launched)
    assert every["kernel_ns"].tolist() == [70, 160, 0]  # the memcpy (op 3) is not a kernel


@pytest.mark.parametrize(
    "precision,allow_tf32,key",
    [("bf16", None, "bf16"), ("fp16", True, "fp16"), ("fp32", True, "tf32"), ("fp32", False, "fp32")],
)
def test_gemm_peak_key(precision, allow_tf32, key):
    assert gemm_peak_key(precision, allow_tf32)[0] == key


def test_gemm_peak_key_states_the_fp32_assumption():
    key, why = gemm_peak_key("fp32", None)
    assert key == "fp32" and "not recorded" in why
