#!/usr/bin/env bash
# Issue 14 steps 34 and 35 landed (SplitTiles.x_w, SplitTiles.aqk_lower) on top of step 33: ours on the GPU.
#  verify43 side by side: the GPU tests of the landed steps (bits against the older hand-overs in bf16; step 33's
#           flushed exps; the split pass and its NaN report); the GPU zoo of the KDA kernel mutants of steps 31-35
#           (the off-diagonal FTZ mutant in its column-factor form: the row-factor form escaped in stop 43b); every
#           KDA check of ours but kda.scale on the tiny config with KDA head dim 128 (seed 27), with the softplus
#           gate (seed 28), on the tiny config (seed 29), 25 examples a check; then kda.scale alone (seed 29)
#  bench    alone, after the verdicts: ours_ex against step33_ex (ours before steps 34 / 35) beside fla's two paths,
#           H = 64 and 8, T = 16K, 5 alternating repeats, each kernel's device time
#   OUT=/tmp/out PARTS="verify43 bench" bash scripts/gpu_stop43c.sh
set -u
NAME=${NAME:-stop43c}
PARTS=${PARTS:-verify43 bench}
source "$(dirname "$0")/gpu_steps.sh"
if has verify43; then
  { tiny_config k128 && tiny_config sp128 softplus; } || exit 1
  export OMP_NUM_THREADS=2
  step tests43 "${T_TESTS:-240}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_x_w.py \
      tests/test_kda_aqk_lower.py tests/test_kda_off_ftz.py tests/test_kda_intra_split.py tests/test_kda_diag_nan_last.py &
  step zoo43 "${T_ZOO:-260}" python3 -m gate.cli zoo --device cuda --mutant kda_intra_offdiag_ftz_without_log2e \
      --mutant kda_intra_diag_ftz_without_log2e --mutant kda_intra_x_hand_over_misplaced \
      --mutant kda_state_aqk_lower_drops_diagonal --mutant kda_chunked_ex_nan_from_block_reference &
  KDA=$(python3 -c "
from invariants.matrix import CHECKS
print(' '.join('--check ' + c.name for c in CHECKS if c.mechanism == 'kda' and c.name != 'kda.scale'))")
  step kda_k128_s27 "${T_GATE:-270}" python3 -m gate.cli run --device cuda --config /tmp/k128 $KDA --seed 27 \
      --examples "${EX:-25}" --no-failures &
  step kda_sp128_s28 "${T_GATE:-270}" python3 -m gate.cli run --device cuda --config /tmp/sp128 $KDA --seed 28 \
      --examples "${EX:-25}" --no-failures &
  step kda_tiny_s29 "${T_GATE:-270}" python3 -m gate.cli run --device cuda $KDA --seed 29 \
      --examples "${EX:-25}" --no-failures &
  wait
  step kda_scale_s29 "${T_SCALE:-120}" python3 -m gate.cli run --device cuda --check kda.scale --seed 29 --no-failures
  export OMP_NUM_THREADS=4
fi
has bench && step bench "${T_BENCH:-180}" python3 scripts/kda_prefill_variants.py --shapes "${SHAPES:-64:16384,8:16384}" \
    --repeats "${REPEATS:-5}" --variants "${VARIANTS:-ours_ex,step33_ex}" --breakdown "${BREAKDOWN:-3}" \
    --json "$L/bench.json"
echo "=== summary"; cat "$L/summary.txt"
has verify43 && { echo "=== tests43"; tail -3 "$L/tests43.log" | cut -c1-250; echo "=== zoo43"; grep -E "^│ kda|ESCAPED" "$L/zoo43.log" | cut -c1-120;
  for f in "$L"/kda_*.log; do echo "-- $f"; grep -E "│ kda\.|checks:|FAIL|Error" "$f" | cut -c1-130; done; }
has bench && { echo "=== bench"; grep -E "REFUSED|ms \[" "$L/bench.log" | cut -c1-170; }
true
