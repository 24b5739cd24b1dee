#!/bin/bash
# Run 8, third device call, with the new defaults committed: (1) screening of the dQ-first order and 3
# programs per SM against the default, the winner through workloads.attention_bench (warmup 200 / rep 2000,
# checks); (2) the code before run 8 (.run8_before/flash_triton.py, carried: git show
# f1684bb:workloads/flash_triton.py) and after, and SDPA, in one process, d 64 twice at warmup 200 / rep 2000,
# d 32 and 128 once at 25 / 100; (3) checks of the committed defaults vs fp32 math attention.
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run8c_gpu.sh
set -o pipefail
export PYTHONUNBUFFERED=1 TRITON_PRINT_AUTOTUNING=1
F='^{\|^Autotun\|^with key\|^finished\|^best config\|^Triton auto'
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
timeout 240 python3 benchmarks/attention_variants.py --grid run8c --tag run8c --out-dir $OUT --budget-s 110 2>&1 \
  | tee $OUT/run8c_log.txt | grep -v "$F"
C=benchmarks/results/attention/run8_compare.py
timeout 170 python3 $C --before .run8_before/flash_triton.py --out $OUT/run8c_compare.jsonl 2>&1 \
  | tee -a $OUT/run8c_log.txt | grep -v "$F"
timeout 100 python3 $C --before .run8_before/flash_triton.py --out $OUT/run8c_compare.jsonl --d-head 32 128 \
  --passes 1 --warmup 25 --rep 100 2>&1 | tee -a $OUT/run8c_log.txt | grep -v "$F"
B="python3 -m workloads.attention_bench --check --impl triton --out $OUT/run8c_check.jsonl"
( timeout 40 $B --d-head 64 32 --seq 777 4096 --causal && timeout 20 $B --d-head 64 --seq 777 \
  && timeout 20 $B --d-head 64 --seq 777 --causal --dtype float32 float16 ) 2>&1 | tee -a $OUT/run8c_log.txt | grep -v "$F"
ls -la $OUT
