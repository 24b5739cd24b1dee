#!/bin/bash
# Run 8, second device call: the L/D load order as before run 8, queries-as-rows dS (ROWS), 3 programs per
# SM, forward launch order again (1x16x16384x64 bf16 causal), the winners through workloads.attention_bench
# (warmup 200 / rep 2000, checks vs fp32); then d_head 128 with the chosen switches (which the backward
# ignores above BWD_OPTS_MAX_D) against the old defaults, and a d-128 check.
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run8b_gpu.sh
set -o pipefail
export PYTHONUNBUFFERED=1 TRITON_PRINT_AUTOTUNING=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
timeout 330 python3 benchmarks/attention_variants.py --grid run8b --tag run8b --out-dir $OUT --budget-s 150 2>&1 \
  | tee $OUT/run8b_log.txt | grep -v '^{\|^Autotun\|^with key\|^finished\|^best config\|^Triton auto'
NEW=$(python3 -c "
import json
c = [json.loads(x) for x in open('$OUT/run8b_variants.jsonl') if '\"chosen\"' in x][-1]
print(json.dumps({k: c[k] for k in ('bwd', 'bwd_opts', 'fwd_head_group')}))")
echo "d 128, old defaults vs FLASH_TRITON_CONFIGS=$NEW"
for cfg in '{}' "$NEW"; do
  FLASH_TRITON_CONFIGS="$cfg" timeout 90 python3 -m workloads.attention_bench --impl triton --d-head 128 \
    --seq 16384 --causal --out $OUT/run8b_d128.jsonl 2>&1 | grep -v '^Autotun\|^with key\|^finished\|^best config\|^Triton auto'
done
FLASH_TRITON_CONFIGS="$NEW" timeout 90 python3 -m workloads.attention_bench --check --impl triton --d-head 128 \
  --seq 777 --causal --out $OUT/run8b_check.jsonl 2>&1 | grep -v '^Autotun\|^with key\|^finished\|^best config\|^Triton auto'
ls -la $OUT
