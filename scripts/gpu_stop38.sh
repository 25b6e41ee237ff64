#!/usr/bin/env bash
# Stop 38 on the GPU, issue 14 step 26 (docs/optimization_log.md): ours' intra pass split in four launches
# (impl.candidates.kda_intra_split) against ours and fla.
#  tests   the split pass's bf16 GPU tests (tests/test_kda_intra_split.py -m gpu): within 2x ours' error against
#          the oracle, W / U on bf16 operands and on tf32; strong decays within the bench bound
#  bench   scripts/kda_prefill_variants.py at H = 64 and 8, T = 16K, 5 alternating repeats, every path
#          oracle-checked first, then each path kernel by kernel ($BREAKDOWN profiled calls): ours, the split
#          pass at its default tiles and one tile choice changed at a time ($VARIANTS), fla, fla's bounded path
#  gate    glmgate gate of the split candidate against ours, $EX examples at each of $SEEDS, in two processes
#          side by side (verdicts, not timings): kda.chunked / causal / paths / packed / batch, and
#          kda.sublayer / rerun / model.paths; kda.scale (full-size pins, > 50 s an example) in a third at
#          seed 0 only (its pins are fixed cases)
#   OUT=/tmp/out PARTS="tests bench" bash scripts/gpu_stop38.sh;  OUT=/tmp/out PARTS=gate SEEDS="0 1" bash ...
#  matrix  ours' checks that reach `chunked` beyond the gate's list (ours runs the split pass since step 26):
#          kda.checkpoint, model.causal and serving.state_machine, $EX_MATRIX examples at seed 0, side by side
#   step 27: OUT=/tmp/out PARTS="tests bench matrix" VARIANTS=columns,split,split_qk bash scripts/gpu_stop38.sh
set -u
NAME=${NAME:-stop38}
PARTS=${PARTS:-tests bench}
source "$(dirname "$0")/gpu_steps.sh"
has tests && step tests "${T_TESTS:-150}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_intra_split.py
has bench && step bench "${T_BENCH:-400}" python3 scripts/kda_prefill_variants.py --shapes "${SHAPES:-64:16384,8:16384}" \
    --repeats 5 --variants "${VARIANTS:-split,split_tf32,split_d128w4,split_o32,split_wu8}" \
    --breakdown "${BREAKDOWN:-10}" --json "$L/bench.json"
if has matrix; then
  for c in kda.checkpoint model.causal serving.state_machine; do
    step "matrix_$c" "${T_MATRIX:-200}" python3 -m gate.cli run --device cuda --check "$c" --examples "${EX_MATRIX:-10}" \
        --seed 0 --no-failures &
  done
  wait
fi
if has gate; then
  CAND="--candidate impl.candidates.kda_intra_split:Candidate --baseline triton"
  for seed in $SEEDS; do
    step "gate_core_s$seed" "${T_GATE:-500}" python3 -m gate.cli gate --device cuda $CAND --check kda.chunked \
        --check kda.causal --check kda.paths --check kda.packed --check kda.batch --examples "${EX:-20}" --seed "$seed" &
    step "gate_layer_s$seed" "${T_GATE:-500}" python3 -m gate.cli gate --device cuda $CAND --check kda.sublayer \
        --check kda.rerun --check model.paths --examples "${EX:-20}" --seed "$seed" &
    [ "$seed" = 0 ] && step gate_scale "${T_GATE:-500}" python3 -m gate.cli gate --device cuda $CAND --check kda.scale \
        --examples "${EX:-20}" --seed 0 &
    wait
  done
fi
echo "=== summary"; cat "$L/summary.txt"
has tests && { echo "=== tests"; tail -15 "$L/tests.log" | cut -c1-250; }
has bench && { echo "=== bench"; grep -E "REFUSED|ms \[| us  |per call" "$L/bench.log" | cut -c1-170; }
has matrix && { echo "=== matrix"; for f in "$L"/matrix_*.log; do grep -E "checks:|│ (kda|model|serving)" "$f" | cut -c1-200; done; }
has gate && { echo "=== gate"; for f in "$L"/gate_*.log; do echo "-- $f"; grep -vE "example [0-9]+/" "$f" | tail -14 | cut -c1-220; done; }
true
