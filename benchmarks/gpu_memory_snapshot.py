"""Record torch.cuda.memory snapshots of a small, self-contained training step on a GPU.

Each scenario runs in its own process so that ``max_memory_allocated`` and the
allocator's segments start from nothing, and recording begins before the first
CUDA allocation: the replayed peak of the snapshot must then equal
``torch.cuda.max_memory_allocated()`` to the byte (tests/test_memory_analysis.py).
``expandable`` uses expandable segments. A dropped-events case needs no GPU:
the ring buffer keeps the last ``max_entries`` events, so tests cut the head of
a complete trace.

Writes ``<out>/<name>.pickle.gz`` (the snapshot dict, gzipped) and
``<out>/<name>.json`` (the torch counters read in the same process, the command,
the versions and the device).

Usage: python benchmarks/gpu_memory_snapshot.py --out tests/data/memory
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

SCENARIOS = {
    # name: (autocast dtype or None, max_entries, PYTORCH_CUDA_ALLOC_CONF)
    "mlp_full_step_fp32": (None, 1_000_000, ""),
    "mlp_full_step_bf16": ("bfloat16", 1_000_000, ""),
    "mlp_full_step_fp32_expandable": (None, 1_000_000, "expandable_segments:True"),
}
STEPS = 3


def run_scenario(name: str, out: Path) -> dict:
    """One scenario in this process (CUDA must not be initialised yet)."""
    import torch

    dtype, max_entries, _ = SCENARIOS[name]
    torch.cuda.memory._record_memory_history(max_entries=max_entries)
    torch.manual_seed(0)
    d, layers, tokens = 2048, 6, 4096
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.LayerNorm(d), torch.nn.Linear(d, 2 * d), torch.nn.GELU(), torch.nn.Linear(2 * d, d)]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(d, 1000)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(tokens, d, device="cuda")
    y = torch.randint(0, 1000, (tokens,), device="cuda")
    peaks = [torch.cuda.max_memory_allocated()]  # model and data creation
    reserved_peaks = [torch.cuda.max_memory_reserved()]
    for _ in range(STEPS):
        torch.cuda.reset_peak_memory_stats()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=getattr(torch, dtype or "bfloat16"), enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated())
        reserved_peaks.append(torch.cuda.max_memory_reserved())
    counters = {
        "max_memory_allocated": max(peaks),  # the run's peak: the maximum of the per-phase peaks
        "phase_peaks": peaks,
        "memory_allocated": torch.cuda.memory_allocated(),
        "max_memory_reserved": max(reserved_peaks),
        "phase_reserved_peaks": reserved_peaks,
        "memory_reserved": torch.cuda.memory_reserved(),
    }
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    with gzip.open(out / f"{name}.pickle.gz", "wb", compresslevel=9) as fh:
        pickle.dump(snap, fh)
    info = {
        "name": name,
        "size": "mlp",
        "mode": "full_step",
        "precision": dtype or "fp32",
        "steps": STEPS,
        "model": f"{layers} x (LayerNorm, Linear {d}->{2 * d}, GELU, Linear {2 * d}->{d}) + Linear {d}->1000, AdamW",
        "phases": "model+data creation, then one per step (reset_peak_memory_stats before each step)",
        "tokens": tokens,
        "max_entries": max_entries,
        "events": sum(len(t) for t in snap["device_traces"]),
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(),
        "command": "python benchmarks/gpu_memory_snapshot.py --out tests/data/memory",
        **counters,
    }
    (out / f"{name}.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), help="run one scenario in this process")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.scenario:
        print(json.dumps(run_scenario(args.scenario, args.out)))
        return 0
    failed = 0
    for name, (_, _, conf) in SCENARIOS.items():
        env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        t0 = time.time()
        cmd = [sys.executable, __file__, "--out", str(args.out), "--scenario", name]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        print(f"{name}: rc={proc.returncode} {time.time() - t0:.1f}s {proc.stdout.strip()[-400:]}")
        if proc.returncode:
            failed += 1
            print(proc.stderr[-2000:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
