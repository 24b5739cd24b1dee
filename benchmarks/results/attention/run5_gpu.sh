#!/bin/bash
# Run 5 (one device call): d 64 and 128 across lengths with the committed defaults, then the run-5 screening.
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run5_gpu.sh
export PYTHONUNBUFFERED=1 TRITON_PRINT_AUTOTUNING=1
nvidia-smi --query-gpu=name,driver_version --format=csv
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
timeout 260 python3 -m workloads.attention_bench --impl triton sdpa --d-head 128 64 \
  --seq 1024 2048 4096 8192 16384 32768 65536 --causal --out $OUT/run5_grid.jsonl 2> $OUT/run5_grid_log.txt
tail -5 $OUT/run5_grid_log.txt
timeout 300 python3 benchmarks/attention_variants.py --grid run5 --tag run5 --out-dir $OUT --budget-s 120 \
  2> $OUT/run5_log.txt
grep -v '^{' $OUT/run5_log.txt | tail -30
ls -la $OUT
