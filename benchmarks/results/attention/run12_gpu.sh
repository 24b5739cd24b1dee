#!/bin/bash
# Run 12 (one device call): at d_head 128 (1x16x16384x128 bf16 causal), the run-8 structure switches of the
# dK/dV kernel one at a time and the forward's head groups, screened next to SDPA (no final autotune run).
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run12_gpu.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv
timeout 400 python3 benchmarks/attention_variants.py --d-head 128 --grid run12 --tag run12 --out-dir $OUT \
  --budget-s 300 --no-final 2> $OUT/run12_log.txt
grep -v '^{\|^Autotun\|^with key\|^finished\|^best config\|^Triton auto' $OUT/run12_log.txt | tail -30
ls -la $OUT
