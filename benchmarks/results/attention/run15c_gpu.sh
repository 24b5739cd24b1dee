#!/bin/bash
# Run 15c (third device call): the warp-specialized Gluon dK/dV kernel (workloads/flash_gluon_ws.py) after run 15b:
# the GPU tests, each config's check in its own process, the timing next to SDPA and the default (heads one after
# another, HEAD_GROUP 1, now the kernel's default; @hgN: groups of N), then the leaderboard (attention_bench,
# warmup 200 / rep 2000: the default, SDPA, and the same with FLASH_TRITON_CONFIGS='{"bwd": "gluon_ws"}') and
# attention_bench's fp32-reference checks with the WS backward.
# Usage on the device machine, repo root: OUT=<dir> bash benchmarks/results/attention/run15c_gpu.sh
export PYTHONUNBUFFERED=1
F='^Autotun\|^with key\|^finished\|^best config\|^Triton auto'
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
timeout 150 python3 -m pytest -q tests/test_flash_gluon_ws.py 2>&1 | tail -3 | tee $OUT/run15c_pytest.txt
ok=""
for c in nc2_dqwg nc2_dqwg_s2 nc2_dqwg_r200 nc2 nc1_2cta nc1_1cta; do
  if timeout 150 python3 benchmarks/results/attention/run15_ws_check.py --check $c >> $OUT/run15c_check.txt 2>&1; then
    ok="$ok $c"
  else
    echo "$c: check failed or timed out (rc $?)" >> $OUT/run15c_check.txt
  fi
  grep "^$c" $OUT/run15c_check.txt | tail -2
done
echo "correct:$ok"
timeout 300 python3 benchmarks/results/attention/run15_ws_check.py --time $ok nc2_dqwg@hg2 nc2_dqwg@hg4 \
  --out $OUT/run15c_time.jsonl 2>&1 | tee $OUT/run15c_time.txt | grep -v "$F"
LEAD="--d-head 64 --seq 16384 --causal --warmup 200 --rep 2000"
timeout 200 python3 -m workloads.attention_bench --impl triton sdpa $LEAD --out $OUT/run15c_lead.jsonl 2>&1 \
  | grep -v "$F" | tail -4
FLASH_TRITON_CONFIGS='{"bwd": "gluon_ws"}' timeout 200 python3 -m workloads.attention_bench --impl triton sdpa $LEAD \
  --out $OUT/run15c_lead_ws.jsonl 2>&1 | grep -v "$F" | tail -4
CHK="--check --impl triton sdpa --d-head 64 --out $OUT/run15c_check.jsonl"
FLASH_TRITON_CONFIGS='{"bwd": "gluon_ws"}' timeout 200 python3 -m workloads.attention_bench $CHK --seq 777 4096 --causal \
  2>&1 | grep -v "$F" | tail -4
FLASH_TRITON_CONFIGS='{"bwd": "gluon_ws"}' timeout 200 python3 -m workloads.attention_bench $CHK --seq 2048 \
  2>&1 | grep -v "$F" | tail -4
python3 - "$OUT" <<'PY'
import json, sys, pathlib
for f in ("run15c_lead.jsonl", "run15c_lead_ws.jsonl", "run15c_check.jsonl"):
    p = pathlib.Path(sys.argv[1]) / f
    for line in p.read_text().splitlines() if p.exists() else []:
        r = json.loads(line)
        keys = [k for k in r if k.endswith("_ms") or k.startswith("rel_err") or k.startswith("err")]
        print(f, r.get("impl"), r.get("seq"), r.get("causal"), {k: r[k] for k in keys})
PY
ls -la $OUT
