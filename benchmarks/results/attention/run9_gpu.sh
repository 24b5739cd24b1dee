#!/bin/bash
# Run 9 (one device call): the defaults committed after run 8, timed exactly as committed.
# Leaderboard shape twice (ours first, then SDPA first), checks vs fp32 math attention at d 32/64/128,
# then d 128/64 across lengths and d 32 at two lengths, next to SDPA.
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run9_gpu.sh
export PYTHONUNBUFFERED=1 TRITON_PRINT_AUTOTUNING=1
nvidia-smi --query-gpu=name,driver_version --format=csv
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
git log -1 --format='commit %H' 2>/dev/null
B="python3 -m workloads.attention_bench"
LEAD="--d-head 64 --seq 16384 --causal --warmup 200 --rep 2000 --out $OUT/run9_lead.jsonl"
timeout 100 $B --impl triton sdpa $LEAD 2> $OUT/run9_log.txt; grep -v Autotun $OUT/run9_log.txt | grep fwd
timeout 100 $B --impl sdpa triton $LEAD 2>> $OUT/run9_log.txt; grep fwd $OUT/run9_log.txt | tail -2
timeout 150 $B --check --impl triton sdpa --d-head 32 64 128 --seq 777 4096 --causal --out $OUT/run9_check.jsonl \
  2>> $OUT/run9_log.txt
timeout 60 $B --check --impl triton --d-head 64 --seq 777 --dtype bfloat16 float32 --out $OUT/run9_check.jsonl \
  2>> $OUT/run9_log.txt
grep 'rel\|o=' $OUT/run9_log.txt | grep -v Autotun | tail -16
timeout 270 $B --impl triton sdpa --d-head 128 64 --seq 1024 2048 4096 8192 16384 32768 65536 --causal \
  --out $OUT/run9_grid.jsonl 2> $OUT/run9_grid_log.txt
timeout 60 $B --impl triton sdpa --d-head 32 --seq 4096 16384 --causal --out $OUT/run9_grid.jsonl 2>> $OUT/run9_grid_log.txt
grep fwd $OUT/run9_grid_log.txt | grep -v Autotun
ls -la $OUT
