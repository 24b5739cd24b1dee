#!/bin/bash
# The runs behind reports/ddp/ (all-reduce and DDP variants), one mode per machine:
#   bash benchmarks/bench_ddp.sh gloo            2-core CPU machine: gloo all-reduce, world sizes 2, 4, 6
#                                                (appends to reports/ddp/allreduce_gloo.jsonl; remove it for a fresh table)
#   OUT=<dir> bash benchmarks/bench_ddp.sh gpu2  nvidia-h200-x2: NCCL all-reduce, xl DDP variants, 2-rank traces (111 s)
#   OUT=<dir> bash benchmarks/bench_ddp.sh gpu4  nvidia-h200-x4: the same at world sizes 2 and 4, trimmed 4-rank traces (203 s)
# From the repository root. Traces are trimmed for committing with scripts/trim_trace.py.
set -euo pipefail
mode=${1:?usage: bench_ddp.sh gloo|gpu2|gpu4}
VARIANTS="torch:25 naive flat overlap bucketed:1 bucketed:10 bucketed:25 bucketed:100 bucketed:1000 torch:1 torch:100 torch:1000 torch:25"
# torch DDP 25 MiB runs first and last: the spread between the two is the run-to-run noise
train() { # world size, output, variants...
  local n=$1 out=$2; shift 2
  python3 -m torch.distributed.run --nproc-per-node "$n" -m profiler_kit.workloads.ddp_train --size xl --ctx 128 \
    --batch 4 --warmup 3 --steps 10 --out "$out" --variants "$@"
}
allreduce() { # backend, world size, output
  python3 -m torch.distributed.run --nproc-per-node "$2" -m profiler_kit.workloads.distributed --backend "$1" \
    --sizes-mb 1 10 100 1000 --out "$3"
}
traces() { # world size, folder
  python3 -c "
import sys
from profiler_kit.run_ddp import record_ddp
for v in ('bucketed', 'torch'):
    print(record_ddp(v, 25, int(sys.argv[1]), 'xl', 128, sys.argv[2], warmup=2, steps=2))
" "$1" "$2"
}
if [ "$mode" = gloo ]; then
  for n in 2 4 6; do
    echo "n=$n load: $(cut -d' ' -f1-3 /proc/loadavg)"
    allreduce gloo $n reports/ddp/allreduce_gloo.jsonl
  done
  exit 0
fi
: "${OUT:?set OUT to the folder that comes back}"
set -x
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
nvidia-smi topo -m
python3 -c 'import torch; print(torch.__version__, torch.cuda.device_count(), torch.cuda.nccl.version())'
case $mode in
gpu2)
  allreduce nccl 2 "$OUT/allreduce_nccl.jsonl"
  train 2 "$OUT/ddp_xl.jsonl" $VARIANTS
  traces 2 "$OUT/trace"
  ;;
gpu4)
  for n in 2 4; do allreduce nccl $n "$OUT/allreduce_nccl_h200x4.jsonl"; done
  train 4 "$OUT/ddp_xl_h200x4.jsonl" $VARIANTS
  # world size 2 on the same host, for the scaling table
  train 2 "$OUT/ddp_xl_h200x4.jsonl" torch:25 naive flat overlap bucketed:25 bucketed:100 torch:100 torch:25
  traces 4 /tmp/trace_raw
  mkdir -p /tmp/trace_xl_ws4
  for f in /tmp/trace_raw/*_rank*.json.gz; do python3 scripts/trim_trace.py "$f" "/tmp/trace_xl_ws4/$(basename "$f")"; done
  cp /tmp/trace_raw/run.json /tmp/trace_raw/ddp.jsonl /tmp/trace_xl_ws4/
  tar -C /tmp -cf "$OUT/trace_xl_ws4.tar" trace_xl_ws4
  ;;
*) echo "unknown mode $mode (gloo|gpu2|gpu4)" >&2; exit 2 ;;
esac
ls -la "$OUT"
