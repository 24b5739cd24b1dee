"""Data-parallel training of the Transformer LM, one process per GPU, started by torchrun.

Times each DDP variant (and ``torch.nn.parallel.DistributedDataParallel``) in
one launch, so they share machine, model and data::

    torchrun --nproc-per-node 2 -m profiler_kit.workloads.ddp_train --size xl --ctx 128 \
        --variants naive flat overlap bucketed:1 bucketed:10 torch:25 --out ddp.jsonl

A variant is ``naive``, ``flat``, ``overlap``, ``bucketed:<MiB>`` or
``torch:<MiB>`` (torch DDP with ``bucket_cap_mb``). With ``--profile-dir`` each
rank writes a torch.profiler trace of the timed steps,
``<dir>/<variant>_rank<r>.json.gz``. Ranges (NVTX + record_function):
``warmup``/``step`` around steps, ``forward``, ``backward``, ``optimizer``,
and the wrappers' ``allreduce``, ``bucket_{i}``, ``allreduce_wait``.

Step time: host clock around each step, with a device sync at its end; a row
keeps, per step, the slowest rank's time. Optimizer: ``torch.optim.AdamW``
(foreach), the same for every variant.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from profiler_kit.workloads.common import nvtx_range
from profiler_kit.workloads.ddp import VARIANTS, unique_params, wrap
from profiler_kit.workloads.sharded_optim import ShardedOptimizer, optimizer_state_bytes
from torch import nn


class TorchDDP(nn.Module):
    """torch's DistributedDataParallel behind the wrappers' interface (it syncs inside backward)."""

    def __init__(self, module: nn.Module, bucket_size_mb: float, device: torch.device):
        super().__init__()
        ids = [device.index] if device.type == "cuda" else None
        self.ddp = nn.parallel.DistributedDataParallel(module, device_ids=ids, bucket_cap_mb=bucket_size_mb)
        self.module = module

    def forward(self, *args, **kwargs):
        return self.ddp(*args, **kwargs)

    def finish_gradient_synchronization(self) -> None:
        """Nothing to wait for: DDP's backward returns after its all-reduces are queued on the stream."""

    def close(self) -> None:
        """Nothing registered outside the DDP object."""


def parse_variant(text: str) -> tuple[str, float]:
    """``"bucketed:25"`` -> ("bucketed", 25.0); bucket size defaults to 25 MiB."""
    name, _, mb = text.partition(":")
    if name not in (*VARIANTS, "torch"):
        raise ValueError(f"unknown variant {name!r}; choose from {(*VARIANTS, 'torch')}")
    return name, float(mb) if mb else 25.0


def build_model(size: str, ctx: int, device: torch.device, seed: int) -> nn.Module:
    """The CS336 Transformer LM of workloads.models (each rank seeds differently: the wrapper's broadcast must fix it)."""
    from profiler_kit.workloads.models import TransformerLM

    torch.manual_seed(seed)
    return TransformerLM(size, ctx, device=device)


def run_variant(args, variant: str, bucket_mb: float, device: torch.device) -> dict:
    """Train ``warmup + steps`` steps with one variant; return the slowest rank's step times and memory."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build_model(args.size, args.ctx, device, seed=rank)
    if variant == "torch":
        dp = TorchDDP(model, bucket_mb, device)
    else:
        dp = wrap(model, variant, bucket_size_mb=bucket_mb)
    params = unique_params(model)
    if args.sharded:
        opt = ShardedOptimizer(params, torch.optim.AdamW, lr=1e-4, weight_decay=0.01)
    else:
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
    g = torch.Generator(device=device).manual_seed(1234 + rank)
    vocab = model.lm_head.weight.shape[0] if hasattr(model, "lm_head") else 10_000
    tokens = torch.randint(0, vocab, (args.batch, args.ctx), device=device, generator=g)
    targets = torch.randint(0, vocab, (args.batch, args.ctx), device=device, generator=g)

    def step(name: str) -> None:
        with nvtx_range(name):
            opt.zero_grad(set_to_none=True)
            with nvtx_range("forward"):
                logits = dp(tokens)
                loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))
            with nvtx_range("backward"):
                loss.backward()
            dp.finish_gradient_synchronization()
            with nvtx_range("optimizer"):
                opt.step()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(args.warmup):
        step("warmup")
    sync()
    dist.barrier()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    prof = None
    if args.profile_dir:
        acts = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        prof = torch.profiler.profile(activities=acts)
        prof.__enter__()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step("step")
        sync()
        times.append(time.perf_counter() - t0)
    label = variant if variant in ("naive", "flat", "overlap") else f"{variant}{bucket_mb:g}mb"
    if prof is not None:
        prof.__exit__(None, None, None)
        args.profile_dir.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(args.profile_dir / f"{label}_rank{rank}.json.gz"))
    t = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    step_s = t.cpu().tolist()
    row = {
        "variant": variant,
        "bucket_mb": bucket_mb if variant in ("bucketed", "torch") else None,
        "label": label,
        "world_size": world,
        "backend": dist.get_backend(),
        "size": args.size,
        "ctx": args.ctx,
        "batch_per_rank": args.batch,
        "sharded_optimizer": args.sharded,
        "params": sum(p.numel() for p in params),
        "buckets": len(dp.buckets) if hasattr(dp, "buckets") else None,
        "warmup": args.warmup,
        "steps": args.steps,
        "profiled": prof is not None,
        "step_s": step_s,
        "step_s_median": statistics.median(step_s),
        "step_s_min": min(step_s),
        "optimizer_state_bytes_rank0": optimizer_state_bytes(opt),
        "peak_memory_bytes_rank0": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "gpus_on_host": torch.cuda.device_count() if device.type == "cuda" else None,
        "launch": args.launch,
        "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else None,
    }
    dp.close()
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="xl", help="model size of workloads.models.SIZES (default xl)")
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4, help="sequences per rank")
    ap.add_argument(
        "--variants", nargs="+", default=["bucketed:25"], help="naive flat overlap bucketed:<MiB> torch:<MiB>"
    )
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--sharded", action="store_true", help="ZeRO-1 sharded AdamW instead of plain AdamW")
    ap.add_argument("--profile-dir", type=Path, default=None, help="write one torch.profiler trace per rank here")
    ap.add_argument("--out", type=Path, default=None, help="JSONL file rank 0 appends one row per variant to")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    variants = [parse_variant(v) for v in args.variants]
    # rows of one launch share this key: the report compares each variant with torch DDP of the same launch
    args.launch = time.strftime("%Y%m%dT%H%M%S") + f"-pid{os.getpid()}"

    if args.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    try:
        for name, mb in variants:
            row = run_variant(args, name, mb, device)
            gc.collect()  # the variant's model, grads and optimizer state go before the next is built
            if device.type == "cuda":
                torch.cuda.empty_cache()
            if dist.get_rank() == 0:
                print(
                    f"{row['label']:>16}: step {row['step_s_median'] * 1e3:8.2f} ms (median of {row['steps']}), "
                    f"peak {(row['peak_memory_bytes_rank0'] or 0) / 2**30:.1f} GiB",
                    flush=True,
                )
                if args.out:
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    with args.out.open("a") as fh:
                        fh.write(json.dumps(row) + "\n")
        if args.profile_dir and dist.get_rank() == 0:
            meta = {"argv": vars(args) | {"profile_dir": str(args.profile_dir), "out": str(args.out)}}
            meta["world_size"] = dist.get_world_size()
            meta["torch"] = torch.__version__
            (args.profile_dir / "run.json").write_text(json.dumps(meta, indent=2, default=str))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
