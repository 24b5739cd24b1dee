#!/bin/bash
# Run 8 (one device call): structure of the dK/dV kernel (Q/dO by TMA descriptors, dP before dV, scaled dS,
# launch order, 3 programs per SM) and the forward's launch order, at 1x16x16384x64 bf16 causal; the
# winners through workloads.attention_bench (warmup 200 / rep 2000, checks vs fp32); then Nsight Compute
# on one launch of the old and new dK/dV kernel and of the forward in both launch orders.
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run8_gpu.sh
set -o pipefail
export PYTHONUNBUFFERED=1 TRITON_PRINT_AUTOTUNING=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
timeout 400 python3 benchmarks/attention_variants.py --grid run8 --tag run8 --out-dir $OUT --budget-s 210 2>&1 \
  | tee $OUT/run8_log.txt | grep -v '^{\|^Autotun\|^with key\|^finished\|^best config\|^Triton auto'
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
timeout 150 $NCU --clock-control none -k regex:'_bwd_dkdv_kernel|_fwd_kernel' \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
  python3 benchmarks/results/attention/run8_ncu.py > $OUT/run8_ncu.txt 2>&1
echo "ncu rc $?"
grep -E '^\s+_|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Achieved Occupancy|Block Limit|Registers Per|Issue Slots Busy|Executed Ipc Active|L2 Hit Rate|Warp Cycles Per Issued' $OUT/run8_ncu.txt | head -90
ls -la $OUT
