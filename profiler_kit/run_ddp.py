"""Launch data-parallel training under torchrun and record one torch.profiler trace per rank.

The launcher is torchrun (``python -m torch.distributed.run``): one process per
GPU, ranks and rendezvous from its environment. NVLink multicast stays off
(``NCCL_NVLS_ENABLE=0`` and friends) whatever the caller's environment says.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# NVLink SHARP / multicast can take a shared host's GPUs down; never let a run turn it on.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def ddp_command(
    variant: str,
    bucket_mb: float,
    nproc: int,
    size: str,
    ctx: int,
    out_dir: Path | None,
    *,
    batch: int = 4,
    warmup: int = 3,
    steps: int = 3,
    sharded: bool = False,
    device: str = "cuda",
    results: Path | None = None,
    python: str = sys.executable,
) -> list[str]:
    """The torchrun command line ``record_ddp`` runs (exposed so it can be shown and tested)."""
    spec = f"{variant}:{bucket_mb:g}" if variant in ("bucketed", "torch") else variant
    cmd = [
        python,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "-m",
        "profiler_kit.workloads.ddp_train",
    ]
    cmd += ["--size", size, "--ctx", str(ctx), "--batch", str(batch), "--variants", spec]
    cmd += ["--warmup", str(warmup), "--steps", str(steps), "--device", device]
    if out_dir is not None:
        cmd += ["--profile-dir", str(out_dir)]
    if results is not None:
        cmd += ["--out", str(results)]
    if sharded:
        cmd.append("--sharded")
    return cmd


def record_ddp(
    variant: str,
    bucket_mb: float,
    nproc: int,
    size: str,
    ctx: int,
    out_dir: Path,
    *,
    batch: int = 4,
    warmup: int = 3,
    steps: int = 3,
    sharded: bool = False,
    device: str = "cuda",
) -> list[Path]:
    """Train ``size`` with DDP variant ``variant`` on ``nproc`` ranks and trace every rank.

    Args:
        variant: "naive", "flat", "overlap", "bucketed" (workloads.ddp) or "torch"
            (torch.nn.parallel.DistributedDataParallel).
        bucket_mb: bucket size in MiB for "bucketed" and "torch"; ignored otherwise.
        nproc: processes (= GPUs) torchrun starts on this host.
        size: model size of workloads.models.SIZES ("small" ... "xl", "2.7B", "tiny").
        ctx: context length; ``batch`` sequences per rank.
        out_dir: gets ``<label>_rank<r>.json.gz`` per rank, ``run.json`` and
            ``ddp.jsonl`` (step times, slowest rank per step).
        warmup, steps: untraced warm-up steps, then traced steps.
        sharded: ZeRO-1 sharded AdamW instead of plain AdamW.
        device: "cuda" (NCCL) or "cpu" (gloo, for trying it without GPUs).

    Returns:
        The trace files, one per rank, sorted by rank.

    Raises:
        RuntimeError: torchrun exited non-zero (its output went to this process's stderr).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = ddp_command(
        variant, bucket_mb, nproc, size, ctx, out_dir, batch=batch, warmup=warmup, steps=steps,
        sharded=sharded, device=device, results=out_dir / "ddp.jsonl",
    )  # fmt: skip
    env = {**os.environ, **NO_MULTICAST}
    root = Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(cmd, env=env, stdout=sys.stderr, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"torchrun exited with {proc.returncode}: {' '.join(cmd)}")
    label = variant if variant not in ("bucketed", "torch") else f"{variant}{float(bucket_mb):g}mb"
    traces = [out_dir / f"{label}_rank{r}.json.gz" for r in range(nproc)]
    missing = [str(t) for t in traces if not t.exists()]
    if missing:
        raise RuntimeError(f"torchrun finished but these traces are missing: {missing}")
    return traces
