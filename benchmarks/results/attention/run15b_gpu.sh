#!/bin/bash
# Run 15b (second device call): the warp-specialized Gluon dK/dV kernel (workloads/flash_gluon_ws.py). Each config is
# first checked in its own process (timeout: a deadlock loses only that config) against the tma backward and fp32
# math attention; the correct ones are then timed next to SDPA (cuDNN) and the default tma backward in one process
# at 1x16x16384x64 bf16 causal (do_bench warmup 200 / rep 2000, median, two passes in opposite orders).
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run15b_gpu.sh [configs...]
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
CONFIGS="nc2_dqwg nc2_dqwg_s2 nc2_dqwg_r200 nc2 nc1_2cta nc1_1cta"
ok=""
TIME_EXTRA="nc2_dqwg@hg1 nc2_dqwg@hg2 nc2_dqwg@hg8"
for c in $CONFIGS; do
  if timeout 150 python3 benchmarks/results/attention/run15_ws_check.py --check $c >> $OUT/run15b_check.txt 2>&1; then
    ok="$ok $c"
  else
    echo "$c: check failed or timed out (rc $?)" >> $OUT/run15b_check.txt
  fi
  grep "^$c" $OUT/run15b_check.txt | tail -2
done
echo "correct:$ok"
timeout 360 python3 benchmarks/results/attention/run15_ws_check.py --time $ok $TIME_EXTRA --out $OUT/run15b_time.jsonl 2>&1 \
  | tee $OUT/run15b_time.txt | grep -v '^Autotun\|^with key\|^finished\|^best config\|^Triton auto'
ls -la $OUT
