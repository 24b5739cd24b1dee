#!/bin/bash
# CPU gloo all-reduce benchmark behind reports/ddp/allreduce_gloo.jsonl (2-core CPU machine, 23 GiB RAM).
# Usage from the repo root: bash reports/ddp/run_gloo.sh   (appends; remove the JSONL first for a fresh table)
for n in 2 4 6; do
  echo "n=$n load: $(cut -d' ' -f1-3 /proc/loadavg)"
  python -m torch.distributed.run --nproc-per-node $n -m workloads.distributed --backend gloo \
    --sizes-mb 1 10 100 1000 --out reports/ddp/allreduce_gloo.jsonl
done
