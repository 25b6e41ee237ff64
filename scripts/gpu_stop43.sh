#!/usr/bin/env bash
# Issue 14 step 33 on the GPU (docs/optimization_log.md "Step 33"): the off-diagonal kernel's exps as
# ex2.approx.ftz (impl.candidates.kda_off_ftz, SplitTiles(off_ftz=True)), gated before it is timed. Built in
# stop 42 on the CPU, which had no device time left for it.
#  gate33   side by side: the candidate's GPU tests (tests/test_kda_off_ftz.py: the same bits where no factor
#           falls below e^-87, within 2x ours' error against the oracle at -5 and -20 a token); glmgate gate of
#           the candidate against ours on the tiny config with KDA head dim 128 (bounded gate) at seeds 20 and 21
#           (core checks) and 20 (layer checks), with the softplus gate at seed 22 (core), the tiny config at 23
#  bench    alone, after the verdicts: scripts/kda_prefill_variants.py ours_ex and offftz_ex beside fla's two
#           paths, 5 alternating repeats, each kernel's device time
#   OUT=/tmp/out PARTS="gate33 bench" bash scripts/gpu_stop43.sh
set -u
NAME=${NAME:-stop43}
PARTS=${PARTS:-gate33 bench}
source "$(dirname "$0")/gpu_steps.sh"
if has gate33; then
  { tiny_config k128 && tiny_config sp128 softplus; } || exit 1
  export OMP_NUM_THREADS=2
  step tests33 "${T_TESTS:-240}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_off_ftz.py \
      tests/test_kda_intra_split.py &
  CAND="--device cuda --candidate ${CANDIDATE:-impl.candidates.kda_off_ftz:Candidate} --baseline ${BASELINE:-triton} --examples ${EX:-20}"
  CORE="--check kda.chunked --check kda.causal --check kda.paths --check kda.packed --check kda.batch"
  LAYER="--check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths"
  step gate33_k128_core_s20 "${T_GATE:-300}" python3 -m gate.cli gate $CAND --config /tmp/k128 $CORE --seed 20 &
  step gate33_k128_core_s21 "${T_GATE:-300}" python3 -m gate.cli gate $CAND --config /tmp/k128 $CORE --seed 21 &
  step gate33_k128_layer_s20 "${T_GATE:-300}" python3 -m gate.cli gate $CAND --config /tmp/k128 $LAYER --seed 20 &
  step gate33_sp128_core_s22 "${T_GATE:-300}" python3 -m gate.cli gate $CAND --config /tmp/sp128 $CORE --seed 22 &
  step gate33_tiny_core_s23 "${T_GATE:-300}" python3 -m gate.cli gate $CAND $CORE --seed 23 &
  wait
  export OMP_NUM_THREADS=4
fi
has bench && step bench "${T_BENCH:-300}" python3 scripts/kda_prefill_variants.py --shapes "${SHAPES:-64:16384,8:16384}" \
    --repeats "${REPEATS:-5}" --variants "${VARIANTS:-ours_ex,offftz_ex}" --breakdown "${BREAKDOWN:-3}" \
    --json "$L/bench.json"
echo "=== summary"; cat "$L/summary.txt"
has gate33 && { echo "=== tests33"; tail -3 "$L/tests33.log" | cut -c1-250;
  for f in "$L"/gate33_*.log; do echo "-- $f"; grep -E "│ (kda|model)|checks:|FAIL|Error" "$f" | cut -c1-150; done; }
has bench && { echo "=== bench"; grep -E "REFUSED|ms \[|^ *(kda|_|fla|ours|chunk|off)" "$L/bench.log" | cut -c1-170; }
true
