#!/bin/bash
# The one GPU run behind reports/ddp/*_h200x4* files (nvidia-h200-x4, 4x H200).
# Usage on the device machine, from the repo root: OUT=<dir> bash reports/ddp/run_gpu4.sh
set -x
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
nvidia-smi topo -m
python3 -c 'import torch; print(torch.__version__, torch.cuda.device_count(), torch.cuda.nccl.version())'
for n in 2 4; do
  python3 -m torch.distributed.run --nproc-per-node $n -m workloads.distributed --backend nccl \
    --sizes-mb 1 10 100 1000 --out $OUT/allreduce_nccl_h200x4.jsonl
done
# world size 4, every variant; torch DDP 25 MiB first and last: the spread between the two is the run-to-run noise
python3 -m torch.distributed.run --nproc-per-node 4 -m workloads.ddp_train --size xl --ctx 128 --batch 4 \
  --warmup 3 --steps 10 --out $OUT/ddp_xl_h200x4.jsonl \
  --variants torch:25 naive flat overlap bucketed:1 bucketed:10 bucketed:25 bucketed:100 bucketed:1000 \
  torch:1 torch:100 torch:1000 torch:25
# world size 2 on the same host, for the scaling table
python3 -m torch.distributed.run --nproc-per-node 2 -m workloads.ddp_train --size xl --ctx 128 --batch 4 \
  --warmup 3 --steps 10 --out $OUT/ddp_xl_h200x4.jsonl \
  --variants torch:25 naive flat overlap bucketed:25 bucketed:100 torch:100 torch:25
python3 -c "
from profiler_kit.run_ddp import record_ddp
for v in ('bucketed', 'torch'):
    print(record_ddp(v, 25, 4, 'xl', 128, '/tmp/trace_raw', warmup=2, steps=2))
"
mkdir -p /tmp/trace_xl_ws4
for f in /tmp/trace_raw/*_rank*.json.gz; do python3 reports/ddp/trim_trace.py $f /tmp/trace_xl_ws4/$(basename $f); done
cp /tmp/trace_raw/run.json /tmp/trace_raw/ddp.jsonl /tmp/trace_xl_ws4/
tar -C /tmp -cf $OUT/trace_xl_ws4.tar trace_xl_ws4
ls -la $OUT /tmp/trace_xl_ws4
