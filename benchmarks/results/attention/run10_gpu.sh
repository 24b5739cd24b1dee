#!/bin/bash
# Run 10 (one device call): where the leaderboard-shape time goes, kernel by kernel, for our Triton FA2 and
# for torch SDPA, recorded with `profiler-kit record attention` (PyTorch profiler, ranges step/forward/
# backward); then the leaderboard timing again. The records come back in run10_records.tgz and the report
# is made off the device (plotly is not installed there):
#   profiler-kit report rec -o reports/attention_leaderboard
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run10_gpu.sh
export PYTHONUNBUFFERED=1 TRITON_PRINT_AUTOTUNING=1
nvidia-smi --query-gpu=name,driver_version --format=csv
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
SHAPE="--batch 1 --heads 16 --seq 16384 --precision bf16 --backend torch --steps 10 --warmup 5"
for d in 64 128; do
  for impl in triton sdpa; do
    timeout 200 python3 -m profiler_kit record attention --impl $impl --d-head $d $SHAPE -o rec 2>&1 | grep -v USDT | tail -4
  done
done
B="python3 -m workloads.attention_bench"
LEAD="--d-head 64 --seq 16384 --causal --warmup 200 --rep 2000 --out $OUT/run10_lead.jsonl"
timeout 100 $B --impl triton sdpa $LEAD 2> run10_log.txt; grep -v Autotun run10_log.txt | grep fwd
tar czf $OUT/run10_records.tgz rec run10_log.txt
ls -la $OUT; du -sh rec
