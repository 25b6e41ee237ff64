#!/usr/bin/env bash
# Stop 40 on the GPU, issue 14 step 30 (docs/optimization_log.md): Γ made by the intra kernels that read it, no
# Γ launch (impl.candidates.kda_gamma_diag), against ours.
#  gate30   side by side (verdicts): the GPU tests of step 30 and of the split pass; glmgate gate of the candidate
#           against ours on the tiny config (head dims <= 32), on it with KDA head dim 128 (bounded gate, seeds
#           $SEEDS) and with head dim 128 and the softplus gate (strong decays through the scans), in processes of
#           five and four checks
#  bench    alone, after the verdicts: scripts/kda_prefill_variants.py ($VARIANTS beside fla and fla's bounded
#           path; 5 alternating repeats; --breakdown $BREAKDOWN: each kernel's device time)
#   OUT=/tmp/out PARTS="gate30 bench" bash scripts/gpu_stop40.sh
set -u
NAME=${NAME:-stop40}
PARTS=${PARTS:-gate30 bench}
source "$(dirname "$0")/gpu_steps.sh"
if has gate30; then
  { tiny_config k128 && tiny_config sp128 softplus; } || exit 1
  # nine processes on 16 cores: two threads each for the float64 oracles
  export OMP_NUM_THREADS=2
  # owed from step 29 (stop 39's device refusals): are ours' bits at the K tile of 64 step 27's under a bounded gate?
  step bits29 120 python3 scripts/kda_tile_bits.py &
  step tests30 "${T_TESTS:-300}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_gamma_diag.py \
      tests/test_kda_intra_split.py tests/test_kda_device_report.py &
  CAND="--device cuda --candidate impl.candidates.kda_gamma_diag:Candidate --baseline triton --examples ${EX:-20}"
  CORE="--check kda.chunked --check kda.causal --check kda.paths --check kda.packed --check kda.batch"
  LAYER="--check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths"
  for seed in $SEEDS; do
    step "gate30_k128_core_s$seed" "${T_GATE:-420}" python3 -m gate.cli gate $CAND --config /tmp/k128 $CORE --seed "$seed" &
    step "gate30_k128_layer_s$seed" "${T_GATE:-420}" python3 -m gate.cli gate $CAND --config /tmp/k128 $LAYER --seed "$seed" &
  done
  step gate30_sp128_core_s3 "${T_GATE:-420}" python3 -m gate.cli gate $CAND --config /tmp/sp128 $CORE --seed 3 &
  step gate30_tiny_core_s4 "${T_GATE:-420}" python3 -m gate.cli gate $CAND $CORE --seed 4 &
  step gate30_tiny_layer_s4 "${T_GATE:-420}" python3 -m gate.cli gate $CAND $LAYER --seed 4 &
  wait
  export OMP_NUM_THREADS=4
fi
has bench && step bench "${T_BENCH:-300}" python3 scripts/kda_prefill_variants.py --shapes "${SHAPES:-64:16384,8:16384}" \
    --repeats "${REPEATS:-5}" --variants "${VARIANTS:-ours_ex,gamma_ex,sub_ex}" --breakdown "${BREAKDOWN:-5}" \
    --json "$L/bench.json"
echo "=== summary"; cat "$L/summary.txt"
has gate30 && { echo "=== tests30"; tail -6 "$L/tests30.log" | cut -c1-250; tail -6 "$L/bits29.log";
  for f in "$L"/gate30_*.log; do echo "-- $f"; grep -vE "example [0-9]+/" "$f" | tail -14 | cut -c1-200; done; }
has bench && { echo "=== bench"; grep -E "REFUSED|ms \[|^ *(kda|_|fla|ours|chunk)" "$L/bench.log" | cut -c1-170; }
true
