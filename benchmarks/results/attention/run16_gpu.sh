#!/bin/bash
# Run 16 (one device call): the warp-specialized backward (workloads/flash_gluon_ws.py, trimmed to run 15's
# two-consumer structure, with a cached launch) as the default for 16-bit inputs on Hopper. GPU tests; the
# leaderboard shape in both orders next to SDPA; checks against fp32 math attention; d 64 across lengths with the
# new default and with the tma kernel (FLASH_TRITON_CONFIGS bwd=tma), next to SDPA, to set GLUON_WS_MIN_SEQ.
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run16_gpu.sh
export PYTHONUNBUFFERED=1
F='^Autotun\|^with key\|^finished\|^best config\|^Triton auto'
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
timeout 150 python3 -m pytest -q tests/test_flash_gluon_ws.py 2>&1 | tail -4 | tee $OUT/run16_pytest.txt
B="python3 -m workloads.attention_bench"
LEAD="--d-head 64 --seq 16384 --causal --warmup 200 --rep 2000 --out $OUT/run16_lead.jsonl"
timeout 100 $B --impl triton sdpa $LEAD 2> $OUT/run16_log.txt; grep fwd $OUT/run16_log.txt | grep -v "$F"
timeout 100 $B --impl sdpa triton $LEAD 2>> $OUT/run16_log.txt; grep fwd $OUT/run16_log.txt | grep -v "$F" | tail -2
CHK="--check --impl triton sdpa --d-head 64 --out $OUT/run16_check.jsonl"
timeout 90 $B $CHK --seq 777 4096 --causal 2>> $OUT/run16_log.txt
timeout 60 $B $CHK --seq 2048 --dtype bfloat16 float16 2>> $OUT/run16_log.txt
grep 'rel\|o=' $OUT/run16_log.txt | grep -v "$F" | tail -8
GRID="--d-head 64 --seq 1024 2048 4096 8192 16384 32768 65536 --causal"
timeout 200 $B --impl triton sdpa $GRID --out $OUT/run16_grid.jsonl 2> $OUT/run16_grid_log.txt
FLASH_TRITON_CONFIGS='{"bwd": "tma"}' timeout 150 $B --impl triton $GRID --out $OUT/run16_grid_tma.jsonl \
  2>> $OUT/run16_grid_log.txt
grep fwd $OUT/run16_grid_log.txt | grep -v "$F"
ls -la $OUT
