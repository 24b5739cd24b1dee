#!/bin/bash
# Run 11c (one device call): before/after of the host-side changes, interleaved in 3 rounds on one machine.
# "before" is the workloads package at the parent commit, carried as .run11_before/pkg (git archive HEAD workloads).
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run11c_gpu.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv
ARGS="--impl triton sdpa --d-head 64 --seq 1024 2048 4096 8192 --causal"
for round in 1 2 3; do
  (cd .run11_before/pkg && timeout 90 python3 -m workloads.attention_bench $ARGS --out $OUT/run11c_before.jsonl 2>&1) \
    | grep fwd | sed "s/^/before r$round /"
  timeout 90 python3 -m workloads.attention_bench $ARGS --out $OUT/run11c_after.jsonl 2>&1 | grep fwd | sed "s/^/after  r$round /"
done
timeout 120 python3 benchmarks/results/attention/run11_fastpath_check.py --out $OUT/run11c_fastpath.jsonl 2>&1 | tail -1
ls -la $OUT
