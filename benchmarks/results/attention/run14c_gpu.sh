#!/bin/bash
# Run 14c (one device call): the dK/dV kernel in Gluon (workloads/flash_gluon.py), screened
# next to SDPA and the run-9 defaults at 1x16x16384x64 bf16 causal; the
# winner then goes through attention_bench (leaderboard timing, warmup 200 / rep 2000) and the fp32-reference checks.
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run14c_gpu.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv
timeout 120 python3 benchmarks/results/attention/run14_gluon_check.py 2>&1 | tee $OUT/run14c_gluon_check.txt | grep -v '^Autotun\|^with key\|^finished\|^best config\|^Triton auto'
timeout 540 python3 benchmarks/attention_variants.py --grid run14c --tag run14c --out-dir $OUT \
  --budget-s 300 2> $OUT/run14c_log.txt
grep -v '^{\|^Autotun\|^with key\|^finished\|^best config\|^Triton auto' $OUT/run14c_log.txt | tail -40
ls -la $OUT
