#!/bin/bash
# Run 16b (one device call): why the warp-specialized backward is slower than the tma kernel at seq 4096 (run 16's
# grid: 0.579 against 0.428 ms) while faster at 2048 and 8192. `profiler-kit record attention` with each backward
# at 4096 and 8192 (PyTorch profiler, 10 steps after 5), then attention_bench again at those lengths.
# Records come back in run16b_records.tgz; report off the device:
#   profiler-kit report rec16b -o /tmp/rep16b
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run16b_gpu.sh
export PYTHONUNBUFFERED=1
F='^Autotun\|^with key\|^finished\|^best config\|^Triton auto'
SHAPE="--batch 1 --heads 16 --d-head 64 --precision bf16 --backend torch --steps 10 --warmup 5"
for mode in gluon_ws tma; do
  for n in 4096 8192; do
    FLASH_TRITON_CONFIGS="{\"bwd\": \"$mode\"}" timeout 100 python3 -m profiler_kit record attention --impl triton \
      --seq $n $SHAPE -o rec16b/$mode 2>&1 | grep -v USDT | tail -2
  done
done
B="python3 -m workloads.attention_bench --impl triton --d-head 64 --seq 2048 4096 8192 --causal --warmup 100 --rep 500"
timeout 100 $B --out $OUT/run16b_grid.jsonl 2> run16b_log.txt
FLASH_TRITON_CONFIGS='{"bwd": "tma"}' timeout 100 $B --out $OUT/run16b_grid_tma.jsonl 2>> run16b_log.txt
grep fwd run16b_log.txt | grep -v "$F"
tar czf $OUT/run16b_records.tgz rec16b run16b_log.txt
ls -la $OUT; du -sh rec16b
