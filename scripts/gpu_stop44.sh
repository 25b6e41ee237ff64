#!/usr/bin/env bash
# For the next session, on an H200 (run with kind "nvidia-h200": issue 14 states its targets on the H200, and
# steps 33-35's 1.309x / 1.446x are the H100's same-run ratios): the KDA prefill bench of ours against ours
# before steps 34-35 and before step 33, beside fla's two paths; then ours' kda.paths and kda.batch in bf16 (the
# self-consistency conditioning of stop 43 has run kda.paths on the GPU, kda.batch only on the CPU).
#  bench44  alone first (a cold machine): H = 64 and 8, T = 16K, 5 alternating repeats, each kernel's device time
#  checks44 side by side: kda.paths and kda.batch on KDA head dim 128 (bounded gate, seed 31; softplus gate, seed 32)
#   OUT=/tmp/out PARTS="bench44 checks44" bash scripts/gpu_stop44.sh
set -u
NAME=${NAME:-stop44}
PARTS=${PARTS:-bench44 checks44}
source "$(dirname "$0")/gpu_steps.sh"
has bench44 && step bench44 "${T_BENCH:-300}" python3 scripts/kda_prefill_variants.py --shapes "${SHAPES:-64:16384,8:16384}" \
    --repeats "${REPEATS:-5}" --variants "${VARIANTS:-ours_ex,step33_ex,step32_ex}" --breakdown "${BREAKDOWN:-3}" \
    --json "$L/bench44.json"
if has checks44; then
  { tiny_config k128 && tiny_config sp128 softplus; } || exit 1
  export OMP_NUM_THREADS=4
  step checks_k128_s31 "${T_GATE:-300}" python3 -m gate.cli run --device cuda --config /tmp/k128 --check kda.paths \
      --check kda.batch --seed 31 --examples "${EX:-30}" --no-failures &
  step checks_sp128_s32 "${T_GATE:-300}" python3 -m gate.cli run --device cuda --config /tmp/sp128 --check kda.paths \
      --check kda.batch --seed 32 --examples "${EX:-30}" --no-failures &
  wait
fi
echo "=== summary"; cat "$L/summary.txt"
has bench44 && { echo "=== bench44"; grep -E "REFUSED|ms \[" "$L/bench44.log" | cut -c1-170; }
has checks44 && for f in "$L"/checks_*.log; do echo "-- $f"; grep -E "│ kda\.|checks:|FAIL|Error|ILL" "$f" | cut -c1-160; done
true
