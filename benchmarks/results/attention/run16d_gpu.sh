#!/bin/bash
# Run 16d (one device call): the GPU tests of the committed warp-specialized backward after its Triton-release gate
# and a torch.compile test were added.
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run16d_gpu.sh
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__)'
timeout 240 python3 -m pytest -q -rs tests/test_flash_gluon_ws.py 2>&1 | tail -6 | tee $OUT/run16d_pytest.txt
