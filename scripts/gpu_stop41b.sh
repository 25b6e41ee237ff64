#!/usr/bin/env bash
# Stop 41 on the GPU, issue 14 step 31 (docs/optimization_log.md): the diagonal kernel's exps as ex2.approx.ftz
# (impl.candidates.kda_diag_ftz, SplitTiles(diag_ftz=True)) against ours, gated before it is timed.
#  gate31   side by side: the split pass's GPU tests (the flushed exps against the oracle in bf16, strong decays
#           included; the same q e^Γ, k e^(Γ_last - Γ), β k e^Γ bits from either kernel) and chunked_ex's;
#           glmgate gate of the candidate against ours on the tiny config with KDA head dim 128 (bounded gate,
#           seeds 0 and 1 core, seed 0 layer checks), with the softplus gate (seed 3, core) and on the tiny config
#           itself (seed 4, core)
#  bench    alone, after the verdicts: scripts/kda_prefill_variants.py ours_ex and ftz_ex beside fla's two
#           paths, 5 alternating repeats, each kernel's device time
#   OUT=/tmp/out PARTS="gate31 bench" bash scripts/gpu_stop41b.sh
set -u
NAME=${NAME:-stop41b}
PARTS=${PARTS:-gate31 bench}
source "$(dirname "$0")/gpu_steps.sh"
if has gate31; then
  { tiny_config k128 && tiny_config sp128 softplus; } || exit 1
  export OMP_NUM_THREADS=2
  step tests31 "${T_TESTS:-240}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_intra_split.py \
      tests/test_kda_device_report.py &
  CAND="--device cuda --candidate impl.candidates.kda_diag_ftz:Candidate --baseline triton --examples ${EX:-20}"
  CORE="--check kda.chunked --check kda.causal --check kda.paths --check kda.packed --check kda.batch"
  LAYER="--check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths"
  step gate31_k128_core_s0 "${T_GATE:-300}" python3 -m gate.cli gate $CAND --config /tmp/k128 $CORE --seed 0 &
  step gate31_k128_core_s1 "${T_GATE:-300}" python3 -m gate.cli gate $CAND --config /tmp/k128 $CORE --seed 1 &
  step gate31_k128_layer_s0 "${T_GATE:-300}" python3 -m gate.cli gate $CAND --config /tmp/k128 $LAYER --seed 0 &
  step gate31_sp128_core_s3 "${T_GATE:-300}" python3 -m gate.cli gate $CAND --config /tmp/sp128 $CORE --seed 3 &
  step gate31_tiny_core_s4 "${T_GATE:-300}" python3 -m gate.cli gate $CAND $CORE --seed 4 &
  wait
  export OMP_NUM_THREADS=4
fi
has bench && step bench "${T_BENCH:-260}" python3 scripts/kda_prefill_variants.py --shapes "${SHAPES:-64:16384,8:16384}" \
    --repeats "${REPEATS:-5}" --variants "${VARIANTS:-ours_ex,ftz_ex}" --breakdown "${BREAKDOWN:-5}" \
    --json "$L/bench.json"
echo "=== summary"; cat "$L/summary.txt"
has gate31 && { echo "=== tests31"; tail -3 "$L/tests31.log" | cut -c1-250;
  for f in "$L"/gate31_*.log; do echo "-- $f"; grep -E "│ (kda|model)|checks:|FAIL|Error" "$f" | cut -c1-150; done; }
has bench && { echo "=== bench"; grep -E "REFUSED|ms \[|^ *(kda|_|fla|ours|chunk)" "$L/bench.log" | cut -c1-170; }
true
