#!/usr/bin/env bash
# Issue 14 steps 34 and 35 on the GPU (docs/optimization_log.md "Step 34", "Step 35"), and step 33's GPU-only
# mutant, with step 33 landed (SplitTiles.off_ftz = True):
#  gate34   side by side: the GPU tests of both candidates (ours' bits in bf16) and of step 33; the GPU zoo of the
#           two FTZ mutants; glmgate gate of impl.candidates.kda_x_w (X to W / U in bf16) and of
#           impl.candidates.kda_aqk_lower (aqk's zero blocks neither stored nor read) against ours, 20 examples a
#           check: KDA head dim 128 with the bounded gate (seed 24 core, 26 layer), the softplus gate (seed 25),
#           the tiny config (seed 25)
#  bench    alone, after the verdicts: scripts/kda_prefill_variants.py at H = 64, T = 16K: ours_ex, step32_ex
#           (ours before step 33), xw_ex, lower_ex, xw_lower_ex and the state pass's launch one choice at a time
#           (st_w8_ex, st_s2_ex, st_bv32_ex) beside fla's two paths, 5 alternating repeats, each kernel's device time
#   OUT=/tmp/out PARTS="gate34 bench" bash scripts/gpu_stop43b.sh
set -u
NAME=${NAME:-stop43b}
PARTS=${PARTS:-gate34 bench}
source "$(dirname "$0")/gpu_steps.sh"
if has gate34; then
  { tiny_config k128 && tiny_config sp128 softplus; } || exit 1
  export OMP_NUM_THREADS=2
  step tests34 "${T_TESTS:-240}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_x_w.py \
      tests/test_kda_aqk_lower.py tests/test_kda_off_ftz.py &
  step zoo33 "${T_ZOO:-240}" python3 -m gate.cli zoo --device cuda --mutant kda_intra_offdiag_ftz_without_log2e \
      --mutant kda_intra_diag_ftz_without_log2e &
  CORE="--check kda.chunked --check kda.causal --check kda.paths --check kda.packed --check kda.batch"
  LAYER="--check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths"
  X="--device cuda --candidate impl.candidates.kda_x_w:Candidate --baseline triton --examples ${EX:-20}"
  A="--device cuda --candidate impl.candidates.kda_aqk_lower:Candidate --baseline triton --examples ${EX:-20}"
  step gate34_k128_core_s24 "${T_GATE:-300}" python3 -m gate.cli gate $X --config /tmp/k128 $CORE --seed 24 &
  step gate34_sp128_core_s25 "${T_GATE:-300}" python3 -m gate.cli gate $X --config /tmp/sp128 $CORE --seed 25 &
  step gate34_k128_layer_s26 "${T_GATE:-300}" python3 -m gate.cli gate $X --config /tmp/k128 $LAYER --seed 26 &
  step gate35_k128_core_s24 "${T_GATE:-300}" python3 -m gate.cli gate $A --config /tmp/k128 $CORE --seed 24 &
  step gate35_tiny_core_s25 "${T_GATE:-300}" python3 -m gate.cli gate $A $CORE --seed 25 &
  step gate35_k128_layer_s26 "${T_GATE:-300}" python3 -m gate.cli gate $A --config /tmp/k128 $LAYER --seed 26 &
  wait
  export OMP_NUM_THREADS=4
fi
has bench && step bench "${T_BENCH:-330}" python3 scripts/kda_prefill_variants.py --shapes "${SHAPES:-64:16384}" \
    --repeats "${REPEATS:-5}" \
    --variants "${VARIANTS:-ours_ex,step32_ex,xw_ex,lower_ex,xw_lower_ex,st_w8_ex,st_s2_ex,st_bv32_ex}" \
    --breakdown "${BREAKDOWN:-3}" --json "$L/bench.json"
echo "=== summary"; cat "$L/summary.txt"
has gate34 && { echo "=== tests34"; tail -3 "$L/tests34.log" | cut -c1-250; echo "=== zoo33"; tail -8 "$L/zoo33.log" | cut -c1-200;
  for f in "$L"/gate3[45]_*.log; do echo "-- $f"; grep -E "│ (kda|model)|checks:|FAIL|Error" "$f" | cut -c1-150; done; }
has bench && { echo "=== bench"; grep -E "REFUSED|ms \[" "$L/bench.log" | cut -c1-170; }
true
