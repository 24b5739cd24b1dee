"""All-reduce benchmark, the torchrun training entry and record_ddp, on CPU processes with gloo."""

from __future__ import annotations

import gzip
import json
import os
import socket
import sys

import pytest
import torch.multiprocessing as mp
from profiler_kit.workloads import ddp_train, distributed
from profiler_kit.workloads.ddp_train import parse_variant

from profiler_kit.run_ddp import NO_MULTICAST, ddp_command, record_ddp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_torchrun(rank: int, world: int, port: int, module: str, argv: list[str]) -> None:
    """Run a torchrun entry point's main() in a spawned process with torchrun's environment."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    os.environ.update(LOCAL_RANK=str(rank))
    {"distributed": distributed, "ddp_train": ddp_train}[module].main(argv)


def test_bus_factor():
    assert distributed.bus_factor(2) == 1.0
    assert distributed.bus_factor(4) == 1.5
    assert distributed.bus_factor(6) == pytest.approx(5 / 3)


def test_all_reduce_benchmark_rows(tmp_path):
    out = tmp_path / "ar.jsonl"
    argv = ["--backend", "gloo", "--sizes-mb", "1", "2", "--iters", "3", "--out", str(out)]
    mp.spawn(_as_torchrun, args=(2, _free_port(), "distributed", argv), nprocs=2, join=True)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["size_bytes"] for r in rows] == [2**20, 2 * 2**20]  # rank 0 alone writes, one row per size
    for r in rows:
        assert r["world_size"] == 2 and r["backend"] == "gloo" and r["warmup"] == 5 and r["iters"] == 3
        assert 0 < r["time_s_min"] <= r["time_s_median"] <= r["time_s_max"]
        assert r["algbw_bytes_per_s"] == pytest.approx(r["size_bytes"] / r["time_s_median"])
        assert r["busbw_bytes_per_s"] == pytest.approx(r["algbw_bytes_per_s"])  # 2(n-1)/n = 1 at n = 2


def test_parse_variant():
    assert parse_variant("bucketed:10") == ("bucketed", 10.0)
    assert parse_variant("torch") == ("torch", 25.0)
    with pytest.raises(ValueError, match="unknown variant"):
        parse_variant("zero2")


def test_ddp_train_rows_and_traces(tmp_path):
    out, prof = tmp_path / "ddp.jsonl", tmp_path / "prof"
    argv = ["--size", "tiny", "--ctx", "16", "--device", "cpu", "--warmup", "1", "--steps", "2"]
    argv += ["--variants", "overlap", "bucketed:0.05", "torch:1", "--out", str(out), "--profile-dir", str(prof)]
    mp.spawn(_as_torchrun, args=(2, _free_port(), "ddp_train", argv), nprocs=2, join=True)
    rows = {r["label"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert list(rows) == ["overlap", "bucketed0.05mb", "torch1mb"]
    assert rows["bucketed0.05mb"]["buckets"] > 1
    for r in rows.values():
        assert len(r["step_s"]) == 2 and r["world_size"] == 2
    names = {}
    for label in rows:
        for rank in range(2):
            with gzip.open(prof / f"{label}_rank{rank}.json.gz", "rt") as fh:
                events = json.load(fh)["traceEvents"]
            names[label, rank] = {e["name"] for e in events if e.get("cat") == "user_annotation"}
    for rank in range(2):
        assert {"step", "forward", "backward", "optimizer", "allreduce", "allreduce_wait"} <= names["overlap", rank]
        assert "bucket_0" in names["bucketed0.05mb", rank] and "bucket_1" in names["bucketed0.05mb", rank]
    assert (prof / "run.json").exists()


def test_ddp_command_is_torchrun():
    cmd = ddp_command("bucketed", 25, 2, "xl", 128, None)
    assert cmd[:6] == [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m"]
    assert cmd[6] == "profiler_kit.workloads.ddp_train"
    assert cmd[cmd.index("--variants") + 1] == "bucketed:25"
    assert "--profile-dir" not in cmd
    assert ddp_command("naive", 25, 4, "small", 256, None)[cmd.index("--variants") + 1] == "naive"
    assert NO_MULTICAST["NCCL_NVLS_ENABLE"] == "0"


def test_record_ddp_one_trace_per_rank(tmp_path):
    traces = record_ddp("bucketed", 0.5, 2, "tiny", 16, tmp_path, device="cpu", warmup=1, steps=1, sharded=True)
    assert traces == [tmp_path / "bucketed0.5mb_rank0.json.gz", tmp_path / "bucketed0.5mb_rank1.json.gz"]
    assert all(t.stat().st_size > 0 for t in traces)
    row = json.loads((tmp_path / "ddp.jsonl").read_text())
    assert row["variant"] == "bucketed" and row["sharded_optimizer"] is True
    assert (
        0 < row["optimizer_state_bytes_rank0"] < 0.75 * 2 * 4 * row["params"]
    )  # rank 0 holds about half of AdamW's 2 moments


def test_record_ddp_failure_raises(tmp_path):
    with pytest.raises(RuntimeError, match="torchrun exited"):
        record_ddp("bucketed", 25, 1, "no-such-size", 16, tmp_path, device="cpu", warmup=0, steps=1)
