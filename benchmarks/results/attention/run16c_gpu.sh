#!/bin/bash
# Run 16c (one device call): the committed defaults after run 16 (the warp-specialized backward for 16-bit inputs on
# Hopper at every length it takes, its kernel renamed _flash_ws_dkdv_kernel so the taxonomy files it under attention).
# GPU tests; the leaderboard shape in both orders next to SDPA; `profiler-kit record attention` for Triton and SDPA
# at that shape (d 64 and 128), for reports/attention_leaderboard (made off the device, plotly is not installed there):
#   profiler-kit report rec -o reports/attention_leaderboard
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run16c_gpu.sh
export PYTHONUNBUFFERED=1
F='^Autotun\|^with key\|^finished\|^best config\|^Triton auto'
nvidia-smi --query-gpu=name,driver_version --format=csv
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
timeout 150 python3 -m pytest -q tests/test_flash_gluon_ws.py 2>&1 | tail -4 | tee $OUT/run16c_pytest.txt
B="python3 -m workloads.attention_bench"
LEAD="--d-head 64 --seq 16384 --causal --warmup 200 --rep 2000 --out $OUT/run16c_lead.jsonl"
timeout 100 $B --impl triton sdpa $LEAD 2> $OUT/run16c_log.txt; grep fwd $OUT/run16c_log.txt | grep -v "$F"
timeout 100 $B --impl sdpa triton $LEAD 2>> $OUT/run16c_log.txt; grep fwd $OUT/run16c_log.txt | grep -v "$F" | tail -2
SHAPE="--batch 1 --heads 16 --seq 16384 --precision bf16 --backend torch --steps 10 --warmup 5"
for d in 64 128; do
  for impl in triton sdpa; do
    timeout 200 python3 -m profiler_kit record attention --impl $impl --d-head $d $SHAPE -o rec 2>&1 | grep -v USDT | tail -2
  done
done
tar czf $OUT/run16c_records.tgz rec
ls -la $OUT; du -sh rec
