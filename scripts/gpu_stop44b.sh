#!/usr/bin/env bash
# Issue 14 step 36 on the GPU (docs/optimization_log.md "Step 36"): a long B = 1 row in pieces, each piece's state
# pass on a second stream beside the next piece's intra pass (impl.candidates.kda_pieces). Run with kind
# "nvidia-h200" (the issue's targets are the H200's):
#  bench36  alone first: scripts/kda_prefill_variants.py at H = 64, T = 16K: ours_ex against pieces of 2, 4, 8 and 4
#           at the default stream priority, beside fla's two paths, 5 alternating repeats (H = 8 is never cut: its
#           state pass runs segments)
#  gate36   side by side: the GPU tests (the bits of one piece in bf16, eager and from a captured graph); glmgate
#           gate of the candidate against ours, 20 examples a check: KDA head dim 128 bounded (core seed 40, layer
#           seed 42), softplus (core seed 41)
#  scale36  alone (not run in stop 44: bench36 refuted the step on the H100 first): the gate on kda.scale (its
#           pins: B = 1 rows of 16K and 64K tokens, pieced, each equal bit for bit to itself in an unpieced batch of 2)
#   OUT=/tmp/out PARTS="bench36 gate36 scale36" bash scripts/gpu_stop44b.sh
set -u
NAME=${NAME:-stop44b}
PARTS=${PARTS:-bench36 gate36 scale36}
source "$(dirname "$0")/gpu_steps.sh"
P="--device cuda --candidate impl.candidates.kda_pieces:Candidate --baseline triton"
has bench36 && step bench36 "${T_BENCH:-220}" python3 scripts/kda_prefill_variants.py --shapes "${SHAPES:-64:16384}" \
    --repeats "${REPEATS:-5}" --variants "${VARIANTS:-ours_ex,pieces2_ex,pieces4_ex,pieces8_ex,pieces4_p0_ex}" \
    --breakdown "${BREAKDOWN:-0}" --json "$L/bench36.json"
if has gate36; then
  { tiny_config k128 && tiny_config sp128 softplus; } || exit 1
  export OMP_NUM_THREADS=2
  step tests36 "${T_TESTS:-200}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_pieces.py &
  CORE="--check kda.chunked --check kda.causal --check kda.paths --check kda.packed --check kda.batch"
  LAYER="--check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths"
  step gate36_k128_core_s40 "${T_GATE:-240}" python3 -m gate.cli gate $P --config /tmp/k128 $CORE --seed 40 --examples "${EX:-20}" &
  step gate36_sp128_core_s41 "${T_GATE:-240}" python3 -m gate.cli gate $P --config /tmp/sp128 $CORE --seed 41 --examples "${EX:-20}" &
  step gate36_k128_layer_s42 "${T_GATE:-240}" python3 -m gate.cli gate $P --config /tmp/k128 $LAYER --seed 42 --examples "${EX:-20}" &
  wait
  export OMP_NUM_THREADS=4
fi
if has scale36; then
  step gate36_scale "${T_SCALE:-200}" python3 -m gate.cli gate $P --check kda.scale --seed 43 --examples "${EX_SCALE:-5}"
fi
echo "=== summary"; cat "$L/summary.txt"
has bench36 && { echo "=== bench36"; grep -E "REFUSED|ms \[" "$L/bench36.log" | cut -c1-170; }
has gate36 && { echo "=== tests36"; tail -3 "$L/tests36.log" | cut -c1-250;
  for f in "$L"/gate36_*.log; do echo "-- $f"; grep -E "│ (kda|model)|checks:|FAIL|Error" "$f" | cut -c1-150; done; }
has scale36 && { echo "=== gate36_scale"; grep -E "│ kda|checks:|FAIL|Error" "$L/gate36_scale.log" | cut -c1-150; }
true
