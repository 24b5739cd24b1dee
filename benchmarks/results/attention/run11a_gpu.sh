#!/bin/bash
# Run 11a (one device call): where the host time of a short forward + sum + backward goes.
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run11_gpu.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
for seq in 1024 4096; do
  timeout 200 python3 benchmarks/attention_host_timeline.py --seq $seq --out $OUT 2>&1 | grep -v Warning | tee -a $OUT/run11_log.txt
done
ls -la $OUT
