#!/bin/bash
# Run 6 (one device call): screening of tile configs at d_head 128 (1x16x16384x128 bf16 causal).
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run6_gpu.sh
export PYTHONUNBUFFERED=1 TRITON_PRINT_AUTOTUNING=1
nvidia-smi --query-gpu=name,driver_version --format=csv
timeout 400 python3 benchmarks/attention_variants.py --d-head 128 --grid d128 --tag run6 --out-dir $OUT \
  --budget-s 150 2> $OUT/run6_log.txt
grep -v '^{\|^Autotun\|^with key\|^finished\|^best config\|^Triton auto' $OUT/run6_log.txt | tail -40
ls -la $OUT
