#!/bin/bash
# Run 15d (fourth device call): KV_REGS (each consumer's K and V tiles in registers: S and dP read one operand from
# shared memory, not two) and DS_REGS (dK's dS operand from registers, dK waited for in the tile), 4 stages; the
# new configs' checks; the timing next to SDPA and the default; the leaderboard and fp32-reference checks with the
# fastest config (FLASH_GLUON_WS_CONFIG); the GPU tests (every 2-consumer config against tma); other lengths.
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run15d_gpu.sh
export PYTHONUNBUFFERED=1
F='^Autotun\|^with key\|^finished\|^best config\|^Triton auto'
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
ok="nc2_dqwg"
for c in nc2_dqwg_kv nc2_dqwg_kvds nc2_dqwg_ds; do
  if timeout 100 python3 benchmarks/results/attention/run15_ws_check.py --check $c >> $OUT/run15d_check.txt 2>&1; then
    ok="$ok $c"
  else
    echo "$c: check failed or timed out (rc $?)" >> $OUT/run15d_check.txt
  fi
  grep "^$c" $OUT/run15d_check.txt | tail -2
done
echo "correct:$ok"
timeout 200 python3 benchmarks/results/attention/run15_ws_check.py --time $ok nc2_dqwg_s4 nc2_kvds \
  --out $OUT/run15d_time.jsonl 2>&1 | tee $OUT/run15d_time.txt | grep -v "$F"
BEST=$(python3 -c "
import json, sys
rows = [json.loads(x) for x in open('$OUT/run15d_time.jsonl')]
ws = [r for r in rows if r['config'] and '@' not in r['variant']]
print(min(ws, key=lambda r: sum(r['ms']))['variant'] if ws else 'nc2_dqwg')")
echo "fastest: $BEST"
export FLASH_GLUON_WS_CONFIG=$BEST
LEAD="--d-head 64 --seq 16384 --causal --warmup 200 --rep 2000"
FLASH_TRITON_CONFIGS='{"bwd": "gluon_ws"}' timeout 100 python3 -m workloads.attention_bench --impl sdpa triton $LEAD \
  --out $OUT/run15d_lead_ws.jsonl 2>&1 | grep -v "$F" | tail -3
timeout 100 python3 -m workloads.attention_bench --impl triton sdpa $LEAD --out $OUT/run15d_lead.jsonl 2>&1 \
  | grep -v "$F" | tail -3
CHK="--check --impl triton --d-head 64 --out $OUT/run15d_check.jsonl"
FLASH_TRITON_CONFIGS='{"bwd": "gluon_ws"}' timeout 60 python3 -m workloads.attention_bench $CHK --seq 4096 --causal \
  2>&1 | grep -v "$F" | tail -2
FLASH_TRITON_CONFIGS='{"bwd": "gluon_ws"}' timeout 60 python3 -m workloads.attention_bench $CHK --seq 2048 \
  2>&1 | grep -v "$F" | tail -2
timeout 150 python3 -m pytest -q tests/test_flash_gluon_ws.py 2>&1 | tail -4 | tee $OUT/run15d_pytest.txt
GRID="--d-head 64 --seq 4096 8192 32768 --causal --warmup 25 --rep 100"
FLASH_TRITON_CONFIGS='{"bwd": "gluon_ws"}' timeout 100 python3 -m workloads.attention_bench --impl triton $GRID \
  --out $OUT/run15d_grid_ws.jsonl 2>&1 | grep -v "$F" | tail -3
timeout 100 python3 -m workloads.attention_bench --impl triton sdpa $GRID --out $OUT/run15d_grid.jsonl 2>&1 \
  | grep -v "$F" | tail -6
ls -la $OUT
