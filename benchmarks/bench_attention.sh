#!/usr/bin/env bash
# FlashAttention-2 in Triton (workloads/flash_triton.py, warp-specialized Gluon backward workloads/flash_gluon_ws.py)
# against torch SDPA, as committed in benchmarks/results/attention/ (benchmarks/README.md, "Attention kernels").
# One call on a Hopper GPU machine (H100/H200; torch and triton 3.6 installed), repository root, about 5 minutes:
#
#     OUT=benchmarks/results/attention bash benchmarks/bench_attention.sh
#
# Writes into $OUT: lead.jsonl (1x16x16384x64 bf16 causal, ours first then SDPA first, do_bench warmup 200 /
# rep 2000 ms), check.jsonl (errors against fp32 math attention), grid.jsonl and grid_tma.jsonl (d 64, causal,
# seq 1024-65536, the default backward and the `tma` one), rec/ (`profiler-kit record attention` at the
# leaderboard shape, d 64 and 128, Triton and SDPA, 10 profiled steps), log.txt (stderr: autotuner choices).
# Kernel by kernel, off the device (plotly): profiler-kit report $OUT/rec -o reports/attention_leaderboard
# Where a machine returns few files, pack them after: tar czf attention.tgz -C $OUT .
#
# Ours against SDPA over the shapes of issue 26 (d 64 and 128, seq 1k-64k, causal and not, bf16 and fp16; fwd,
# bwd and both in ms and TFLOP/s, one process, a side-by-side table at the end) instead of the set above:
#
#     OUT=... bash benchmarks/bench_attention.sh sweep     # 112 rows; sweep.jsonl and sweep.md
#     OUT=... bash benchmarks/bench_attention.sh quick     # d 64 and 128, seq 4096 and 16384, bf16: quick.jsonl/.md
#
# The head-dim-128 Gluon kernels, every config of each, against SDPA and the Triton kernels (attention_gluon_screen.py:
# each config first probed in its own process, then seq 4096-65536, causal and not; about 2 minutes on an H100):
#
#     OUT=... bash benchmarks/bench_attention.sh screen    # screen_d128.jsonl, screen_d128.md, best.json
set -uo pipefail
OUT=${OUT:-benchmarks/results/attention}
mkdir -p "$OUT"
# workloads/ installs as profiler_kit.workloads (setup.cfg); install the checkout once where it is not yet
python3 -c 'import profiler_kit.workloads' 2>/dev/null || python3 -m pip install -q --no-deps --no-build-isolation -e .
case "${1:-}" in
  screen)
    S="python3 benchmarks/attention_gluon_screen.py"
    $S --probe "$OUT/probed.json" || exit
    $S --seq 4096 16384 65536 --probed "$OUT/probed.json" --out "$OUT/screen_d128.jsonl" --best "$OUT/best.json" |
      tee "$OUT/screen_d128.md"
    exit "${PIPESTATUS[0]}"
    ;;
  sweep | quick)
    FLAG=$([ "$1" = quick ] && echo --quick || echo --sweep)
    rm -f "$OUT/$1.jsonl"
    python3 -c 'import torch, triton; print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)'
    python3 -m profiler_kit.workloads.attention_bench $FLAG --out "$OUT/$1.jsonl" | tee "$OUT/$1.md"
    exit "${PIPESTATUS[0]}"
    ;;
esac
rm -rf "$OUT"/{lead,check,grid,grid_tma}.jsonl "$OUT/rec" "$OUT/log.txt"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_flash_gluon_ws.py 2>&1 | tail -3

B="python3 -m profiler_kit.workloads.attention_bench"
LEAD="--d-head 64 --seq 16384 --causal --warmup 200 --rep 2000 --out $OUT/lead.jsonl"
timeout 100 $B --impl triton sdpa $LEAD 2>>"$OUT/log.txt"
timeout 100 $B --impl sdpa triton $LEAD 2>>"$OUT/log.txt"
CHECK="--check --impl triton sdpa --d-head 64 --out $OUT/check.jsonl"
timeout 90 $B $CHECK --seq 777 4096 --causal 2>>"$OUT/log.txt"
timeout 60 $B $CHECK --seq 2048 --dtype bfloat16 float16 2>>"$OUT/log.txt"
GRID="--d-head 64 --seq 1024 2048 4096 8192 16384 32768 65536 --causal"
timeout 200 $B --impl triton sdpa $GRID --out "$OUT/grid.jsonl" 2>>"$OUT/log.txt"
FLASH_TRITON_CONFIGS='{"bwd": "tma"}' timeout 150 $B --impl triton $GRID --out "$OUT/grid_tma.jsonl" 2>>"$OUT/log.txt"

SHAPE="--batch 1 --heads 16 --seq 16384 --precision bf16 --backend torch --steps 10 --warmup 5"
for d in 64 128; do
  for impl in triton sdpa; do
    timeout 200 python3 -m profiler_kit record attention --impl "$impl" --d-head "$d" $SHAPE -o "$OUT/rec" 2>&1 | tail -1
  done
done
python3 - "$OUT" <<'EOF'
import json, sys
for name in ("lead", "grid", "grid_tma"):
    for line in open(f"{sys.argv[1]}/{name}.jsonl"):
        r = json.loads(line)
        print(name, r["impl"], r["seq"], r["status"], *(f"{r.get(k, float('nan')):.3f}" for k in ("fwd_ms", "bwd_ms", "fwd_bwd_ms")))
EOF
