#!/bin/bash
# The one GPU run behind reports/ddp/*nccl* and *xl* files (nvidia-h200-x2, 2x H200).
# Usage on the device machine, from the repo root: OUT=<dir> bash reports/ddp/run_gpu.sh
set -x
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
nvidia-smi topo -m
python3 -c 'import torch; print(torch.__version__, torch.cuda.device_count(), torch.cuda.nccl.version())'
TR="python3 -m torch.distributed.run --nproc-per-node 2"
$TR -m workloads.distributed --backend nccl --sizes-mb 1 10 100 1000 --out $OUT/allreduce_nccl.jsonl
# torch DDP first and last: the spread between the two is the run-to-run noise
$TR -m workloads.ddp_train --size xl --ctx 128 --batch 4 --warmup 3 --steps 10 --out $OUT/ddp_xl.jsonl \
  --variants torch:25 naive flat overlap bucketed:1 bucketed:10 bucketed:25 bucketed:100 bucketed:1000 torch:1 torch:100 torch:1000 torch:25
python3 -c "
from profiler_kit.run_ddp import record_ddp
import os
for v in ('bucketed', 'torch'):
    print(record_ddp(v, 25, 2, 'xl', 128, os.environ['OUT'] + '/trace', warmup=2, steps=2))
"
ls -laR $OUT
