#!/bin/bash
# Run 7 (one device call): register caps (maxnreg) on the d-64 winners (1x16x16384x64 bf16 causal).
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run7_gpu.sh
export PYTHONUNBUFFERED=1 TRITON_PRINT_AUTOTUNING=1
nvidia-smi --query-gpu=name,driver_version --format=csv
timeout 400 python3 benchmarks/attention_variants.py --grid run7 --tag run7 --out-dir $OUT \
  --budget-s 150 2> $OUT/run7_log.txt
grep -v '^{\|^Autotun\|^with key\|^finished\|^best config\|^Triton auto' $OUT/run7_log.txt | tail -40
ls -la $OUT
