#!/bin/bash
# Run 11b (one device call): the launch-plan cache and the fused D kernel (dO copy, dQ zeroing).
# Host time before (the code at the parent commit, carried as .run11_before/flash_triton.py) and after,
# each in its own process; launches through cached plans checked against Triton's own and float64 math;
# the usual checks; d 64/128 across lengths and the leaderboard shape next to SDPA.
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run11b_gpu.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv
T="timeout 100 python3 benchmarks/attention_host_timeline.py"
for seq in 1024 4096; do
  $T --seq $seq --impl-file .run11_before/flash_triton.py --tag _before 2>&1 | grep -v Warn | tee -a $OUT/run11b_log.txt
  $T --seq $seq --out $OUT --tag _after 2>&1 | grep -v Warn | tee -a $OUT/run11b_log.txt
done
rm -f $OUT/host_trace_*
timeout 120 python3 benchmarks/results/attention/run11_fastpath_check.py --out $OUT/run11_fastpath.jsonl 2>&1 | tail -3
B="python3 -m workloads.attention_bench"
timeout 100 $B --check --impl triton sdpa --d-head 64 128 --seq 777 4096 --causal --out $OUT/run11_check.jsonl 2>> $OUT/run11b_log.txt
grep 'rel\|o=' $OUT/run11b_log.txt | tail -8
timeout 60 $B --impl triton sdpa --d-head 64 --seq 16384 --causal --warmup 200 --rep 2000 --out $OUT/run11_lead.jsonl \
  2>> $OUT/run11b_log.txt
timeout 150 $B --impl triton sdpa --d-head 64 128 --seq 1024 2048 4096 8192 16384 --causal --out $OUT/run11_grid.jsonl \
  2>> $OUT/run11b_log.txt
grep fwd $OUT/run11b_log.txt | grep -v Autotun | tail -24
ls -la $OUT
