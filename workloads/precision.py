"""Mixed-precision experiments and the warm-up study (CS336 assignment 2: fp32 vs bf16 autocast, and timings after 0-5 warm-up steps).

- ``accumulation()``: summing 0.01 a thousand times in float32 / float16 /
  mixed accumulators shows what low-precision accumulation loses.
- ``autocast_dtypes()``: the dtype of each tensor of a toy model (parameters,
  fc1 output, LayerNorm output, logits, loss, gradients) inside autocast.
- ``warmup_study()``: mean and spread of timed steps after 0, 1, 2, 5 warm-ups.

Run: ``python -m profiler_kit.workloads.precision --device cuda --size small --out results.json``
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import torch
from profiler_kit.workloads.common import emit_json
from profiler_kit.workloads.harness import measure, stats
from profiler_kit.workloads.models import RunSpec, build
from torch import nn


def accumulation(n: int = 1000, value: float = 0.01) -> list[dict]:
    """The course's accumulation experiment: the sum each accumulator/addend dtype pair reaches."""
    cases = [
        ("float32", torch.float32, torch.float32),
        ("float16", torch.float16, torch.float16),
        ("float32 += float16", torch.float32, torch.float16),
        ("float32 += float16 upcast", torch.float32, "upcast"),
    ]
    rows = []
    for label, acc_dtype, add_dtype in cases:
        s = torch.tensor(0, dtype=acc_dtype)
        for _ in range(n):
            if add_dtype == "upcast":
                x = torch.tensor(value, dtype=torch.float16).type(torch.float32)
            else:
                x = torch.tensor(value, dtype=add_dtype)
            s += x
        exact = n * value
        rows.append({"case": label, "sum": float(s), "exact": exact, "abs_error": abs(float(s) - exact)})
    return rows


class ToyModel(nn.Module):
    """The course's toy model: fc1 -> ReLU -> LayerNorm -> fc2."""

    def __init__(self, in_features: int = 32, out_features: int = 8):
        super().__init__()
        self.fc1 = nn.Linear(in_features, 10, bias=False)
        self.ln = nn.LayerNorm(10)
        self.fc2 = nn.Linear(10, out_features, bias=False)
        self.relu = nn.ReLU()
        self.seen: dict[str, torch.dtype] = {}

    def forward(self, x):
        a = self.fc1(x)
        self.seen["fc1 output"] = a.dtype
        h = self.ln(self.relu(a))
        self.seen["layernorm output"] = h.dtype
        return self.fc2(h)


def autocast_dtypes(device: str = "cpu", dtype: torch.dtype = torch.bfloat16) -> list[dict]:
    """Observed dtypes of the toy model's tensors in one autocast forward and a backward."""
    model = ToyModel().to(device)
    x = torch.randn(4, 32, device=device)
    with torch.autocast(torch.device(device).type, dtype=dtype):
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, torch.zeros(4, dtype=torch.long, device=device))
    loss.backward()
    seen = {"parameters (fc1.weight)": model.fc1.weight.dtype, **model.seen}
    seen["logits"] = logits.dtype
    seen["loss"] = loss.dtype
    seen["gradient (fc1.weight.grad)"] = model.fc1.weight.grad.dtype
    return [
        {"tensor": k, "dtype": str(v).replace("torch.", ""), "autocast": str(dtype).replace("torch.", "")}
        for k, v in seen.items()
    ]


def warmup_study(spec: RunSpec, warmups: tuple[int, ...] = (0, 1, 2, 5)) -> list[dict]:
    """Step-time statistics of ``spec.steps`` timed steps after each number of warm-ups, each on a fresh model.

    The first step pays one-time costs (allocator growth, cuBLAS handles, kernel
    selection); without warm-up they land in the mean and the spread.
    """
    rows = []
    for w in warmups:
        s = replace(spec, warmup=w)
        workload = build(s)
        times = measure(workload, w, s.steps, s.device)
        del workload
        rows.append(
            {
                "warmup": w,
                **{f"step_ms_{k}": v for k, v in stats(times["step_wall"]).items()},
                "times_ms": times["step_wall"],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Mixed-precision experiments and warm-up study.")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--size", default="small")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--mode", default="train")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", help="JSON file for the results (stdout otherwise)")
    args = ap.parse_args(argv)
    spec = RunSpec(size=args.size, ctx=args.ctx, mode=args.mode, steps=args.steps, device=args.device)
    result = {
        "accumulation": accumulation(),
        "autocast_dtypes": autocast_dtypes(args.device, torch.bfloat16) + autocast_dtypes(args.device, torch.float16),
        "warmup_study": {"spec": spec.to_dict(), "rows": warmup_study(spec)},
    }
    emit_json(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
