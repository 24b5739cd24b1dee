#!/bin/bash
# Run 16e (one device call): after the review moved flash_gluon_ws onto flash_triton's launch path (_launch: the
# compiled kernel called directly after a shape's first launch) and its capability cache, the GPU tests and the
# leaderboard shape next to SDPA once more.
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run16e_gpu.sh
export PYTHONUNBUFFERED=1
F='^Autotun\|^with key\|^finished\|^best config\|^Triton auto'
nvidia-smi --query-gpu=name,driver_version --format=csv
timeout 240 python3 -m pytest -q tests/test_flash_gluon_ws.py 2>&1 | tail -3 | tee $OUT/run16e_pytest.txt
LEAD="--d-head 64 --seq 16384 --causal --warmup 200 --rep 2000 --out $OUT/run16e_lead.jsonl"
timeout 100 python3 -m workloads.attention_bench --impl triton sdpa $LEAD 2> $OUT/run16e_log.txt
grep fwd $OUT/run16e_log.txt | grep -v "$F"
