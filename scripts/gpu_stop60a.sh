#!/usr/bin/env bash
# Issue 14 step 58's first GPU run with the stop's last ~270 s of device time (~80 s): its bits tests, its mutant and
# the probe (ours / ours2 / stageo) only. No gate, so nothing lands here: scripts/gpu_stop60.sh is its landing call
#   OUT=/tmp/out bash scripts/gpu_stop60a.sh
set -u
NAME=${NAME:-stop60a}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
step tests 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_stage_o.py tests/test_mla_out_uv.py &
step zoo58 120 python3 -m gate.cli zoo --device cuda --mutant mla_producer_staged_store_drops_heads &
step probe 120 python3 scripts/mla_q_probe.py --forms ours2,stageo --shapes 32x32768,128x32768,256x32768 \
    --json "$L/probe.json" &
wait
echo "=== summary"; cat "$L/summary.txt"
echo "tests: $(tail -1 "$L/tests.log" | cut -c1-200)"
grep -E "^│ [a-z]" "$L/zoo58.log" | cut -c1-90
grep -E "us \[|device|oracle" "$L/probe.log" | cut -c1-200
true
