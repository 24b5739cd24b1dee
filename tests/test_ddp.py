"""DDP variants and the sharded optimizer against single-process training (gloo, world size 2).

One spawn of two CPU processes trains every variant and saves each rank's
final parameters; the reference is computed here, in this process, with plain
single-process training on the full batch.
"""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from profiler_kit.workloads.ddp import unique_params, wrap
from profiler_kit.workloads.sharded_optim import ShardedOptimizer, optimizer_state_bytes, shard_owners
from torch import nn

WORLD = 2
BATCH = 8  # full batch; each rank gets BATCH // WORLD rows
STEPS = 5
SHARDED_STEPS = 10
CASES = {  # name -> (variant, bucket_size_mb)
    "naive": ("naive", 0),
    "flat": ("flat", 0),
    "overlap": ("overlap", 0),
    "bucketed_small": ("bucketed", 0.0005),  # ~524 bytes: several buckets
    "bucketed_large": ("bucketed", 25),  # everything in one bucket
}


class Toy(nn.Module):
    """Tied embedding/output weight, a frozen layer, a norm: the cases a wrapper can get wrong."""

    def __init__(self, vocab: int = 16, d: int = 12):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.frozen = nn.Linear(d, d)
        self.frozen.requires_grad_(False)
        self.l1 = nn.Linear(d, 2 * d)
        self.l2 = nn.Linear(2 * d, d)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x):
        h = self.frozen(self.emb(x))
        h = h + self.l2(torch.relu(self.l1(h)))
        return self.head(self.norm(h))


def build(seed: int) -> Toy:
    torch.manual_seed(seed)
    return Toy()


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randint(0, 16, (BATCH, 6), generator=g)
    return x, torch.roll(x, -1, dims=1)


def loss_fn(model, x, y):
    logits = model(x)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    lo, hi = rank * BATCH // world, (rank + 1) * BATCH // world
    try:
        for name, (variant, mb) in CASES.items():
            model = wrap(build(seed=rank), variant, bucket_size_mb=mb)  # rank 1 starts different: broadcast fixes it
            opt = torch.optim.SGD(unique_params(model), lr=0.2, momentum=0.9)
            for step in range(STEPS):
                x, y = batch(step)
                opt.zero_grad(set_to_none=step % 2 == 0)  # both ways: bucket views must survive either
                loss_fn(model, x[lo:hi], y[lo:hi]).backward()
                model.finish_gradient_synchronization()
                opt.step()
            model.close()
            torch.save(model.module.state_dict(), f"{out}/{name}_rank{rank}.pt")

        # control: the same training with no gradient sync must differ from the reference
        model = build(seed=0)
        opt = torch.optim.SGD(unique_params(model), lr=0.2, momentum=0.9)
        for step in range(STEPS):
            x, y = batch(step)
            opt.zero_grad()
            loss_fn(model, x[lo:hi], y[lo:hi]).backward()
            opt.step()
        torch.save(model.state_dict(), f"{out}/nosync_rank{rank}.pt")

        # ZeRO-1: sharded AdamW over gradients averaged by the naive wrapper
        model = wrap(build(seed=rank), "naive")
        opt = ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=0.01, weight_decay=0.1)
        for step in range(SHARDED_STEPS):
            x, y = batch(step)
            opt.zero_grad()
            loss_fn(model, x[lo:hi], y[lo:hi]).backward()
            model.finish_gradient_synchronization()
            opt.step()
        torch.save(
            {"params": model.module.state_dict(), "state_bytes": optimizer_state_bytes(opt)},
            f"{out}/sharded_rank{rank}.pt",
        )
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(WORLD, _free_port(), str(out)), nprocs=WORLD, join=True)
    return out


def reference(steps: int, optimizer: str) -> tuple[dict, int]:
    """Single-process training on the full batch; returns final state dict and optimizer-state bytes."""
    model = build(seed=0)
    if optimizer == "sgd":
        opt = torch.optim.SGD(unique_params(model), lr=0.2, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    for step in range(steps):
        x, y = batch(step)
        opt.zero_grad()
        loss_fn(model, x, y).backward()
        opt.step()
    return model.state_dict(), optimizer_state_bytes(opt)


def assert_states_close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("case", list(CASES))
def test_variant_equals_single_process(results, case):
    want, _ = reference(STEPS, "sgd")
    for rank in range(WORLD):
        got = torch.load(results / f"{case}_rank{rank}.pt")
        assert_states_close(got, want)
        assert got["head.weight"].data_ptr() == got["emb.weight"].data_ptr() or torch.equal(
            got["head.weight"], got["emb.weight"]
        )


def test_frozen_parameter_is_rank0s_and_unchanged(results):
    frozen0 = build(seed=0).frozen.weight.detach()
    assert not torch.equal(frozen0, build(seed=1).frozen.weight.detach())  # the broadcast had work to do
    for rank in range(WORLD):
        torch.testing.assert_close(
            torch.load(results / f"naive_rank{rank}.pt")["frozen.weight"], frozen0, rtol=0, atol=0
        )


def test_without_sync_training_differs(results):
    """Control: the tolerance above is tight enough to see missing gradient averaging."""
    want, _ = reference(STEPS, "sgd")
    got = torch.load(results / "nosync_rank0.pt")
    assert (got["l1.weight"] - want["l1.weight"]).abs().max() > 1e-3


def test_sharded_adamw_equals_unsharded(results):
    want, _ = reference(SHARDED_STEPS, "adamw")
    for rank in range(WORLD):
        assert_states_close(torch.load(results / f"sharded_rank{rank}.pt")["params"], want)


def test_sharded_state_is_about_one_over_world(results):
    _, full_bytes = reference(SHARDED_STEPS, "adamw")
    per_rank = [torch.load(results / f"sharded_rank{rank}.pt")["state_bytes"] for rank in range(WORLD)]
    assert sum(per_rank) == full_bytes  # every parameter's state lives on exactly one rank
    # uneven shards: at most one parameter's state (2 moments + step) more than an even split
    largest = max(p.numel() for p in unique_params(build(0))) * 4 * 2 + 4
    for b in per_rank:
        assert abs(b - full_bytes / WORLD) <= largest
        assert b < 0.75 * full_bytes


def test_shard_owners_balance():
    assert shard_owners([10, 1, 1, 8], 2) == [0, 1, 1, 1]
    assert shard_owners([5], 3) == [0]
    assert sorted(shard_owners([3, 3, 3], 3)) == [0, 1, 2]


def test_unique_params_skips_frozen_and_tied():
    m = build(0)
    ps = unique_params(m)
    assert len({id(p) for p in ps}) == len(ps)
    assert all(p.requires_grad for p in ps)
    assert any(p is m.emb.weight for p in ps) and not any(p is m.frozen.weight for p in ps)


def test_unknown_variant_rejected():
    with pytest.raises(ValueError, match="unknown DDP variant"):
        wrap(nn.Linear(2, 2), "zero3")
