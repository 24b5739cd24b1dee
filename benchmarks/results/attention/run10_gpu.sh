#!/bin/bash
# Run 10 (one device call): where the leaderboard-shape time goes, kernel by kernel, for our Triton FA2 and
# for torch SDPA, recorded with `profiler-kit record attention` (PyTorch profiler, NVTX-style ranges
# forward/backward) and broken down with `profiler-kit report`; then the leaderboard timing again.
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run10_gpu.sh
export PYTHONUNBUFFERED=1 TRITON_PRINT_AUTOTUNING=1
nvidia-smi --query-gpu=name,driver_version --format=csv
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
SHAPE="--batch 1 --heads 16 --seq 16384 --d-head 64 --precision bf16 --backend torch --steps 10 --warmup 5"
for impl in triton sdpa; do
  timeout 200 python3 -m profiler_kit record attention --impl $impl $SHAPE -o rec 2>&1 | grep -v USDT | tail -4
done
python3 -m profiler_kit report rec -o report_md
python3 -m profiler_kit report rec -o report_csv --format csv
B="python3 -m workloads.attention_bench"
LEAD="--d-head 64 --seq 16384 --causal --warmup 200 --rep 2000 --out $OUT/run10_lead.jsonl"
timeout 100 $B --impl triton sdpa $LEAD 2> run10_log.txt; grep -v Autotun run10_log.txt | grep fwd
tar czf $OUT/run10_records.tgz rec report_md report_csv run10_log.txt
ls -la $OUT; du -sh rec
