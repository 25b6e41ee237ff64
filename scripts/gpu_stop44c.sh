#!/usr/bin/env bash
# Issue 14 steps 36 and 37 on the GPU, after stop44b (on an H100) refuted step 36 there:
#  probe37  scripts/kda_decode_early_probe.py: the KDA decode with each program's state block loaded first
#           (early_h) against the same launches without it, ours and fla, CUDA graphs, B = 1 / 16 / 64 / 256
#  bench36  step 36's pieces again at H = 64, T = 16K (on the machine this call gets: the H200 is the issue's)
#   OUT=/tmp/out PARTS="probe37 bench36" bash scripts/gpu_stop44c.sh
set -u
NAME=${NAME:-stop44c}
PARTS=${PARTS:-probe37 bench36}
source "$(dirname "$0")/gpu_steps.sh"
has probe37 && step probe37 "${T_PROBE:-200}" python3 scripts/kda_decode_early_probe.py --repeats "${REPEATS:-5}" \
    --json "$L/probe37.json"
has bench36 && step bench36 "${T_BENCH:-200}" python3 scripts/kda_prefill_variants.py --shapes 64:16384 \
    --repeats "${REPEATS:-5}" --variants "${VARIANTS:-ours_ex,pieces2_ex,pieces4_ex}" --breakdown 0 \
    --json "$L/bench36.json"
echo "=== summary"; cat "$L/summary.txt"
has probe37 && { echo "=== probe37"; grep -E "bits|us \[" "$L/probe37.log" | cut -c1-150; }
has bench36 && { echo "=== bench36"; grep -E "REFUSED|ms \[" "$L/bench36.log" | cut -c1-170; }
true
