"""Record the small CPU Kineto trace used by tests/test_kineto.py.

Run from the repository root: ``python tests/data/kineto/make_fixtures.py``.
Two profiled steps of a toy attention on 8x8 tensors, annotated with the
course's range names; the test checks the names, counts and nesting below.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

OUT = Path(__file__).resolve().parent / "cpu_attention.pt.trace.json.gz"
LAYERS = 2


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    with record_function("scaled dot product attention"):
        with record_function("computing attention scores"):
            scores = q @ k.T
        with record_function("computing softmax"):
            weights = torch.softmax(scores, dim=-1)
        with record_function("final matmul"):
            return weights @ v


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(8, 8)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=1, warmup=1, active=2),
            on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
        ) as prof:
            for _ in range(4):
                with record_function("step"):
                    with record_function("forward"):
                        h = x
                        for _ in range(LAYERS):
                            h = attention(h, h, h)
                    with record_function("optimizer"):
                        x.add_(h, alpha=1e-3)
                prof.step()
        doc = json.loads(raw.read_text())
    doc["traceName"] = OUT.name  # drop the temporary path the profiler wrote
    with gzip.open(OUT, "wt", compresslevel=9) as f:
        json.dump(doc, f)
    print(f"wrote {OUT} (torch {torch.__version__}, Python {sys.version.split()[0]})")


if __name__ == "__main__":
    shutil.rmtree(Path(__file__).resolve().parent / "__pycache__", ignore_errors=True)
    main()
