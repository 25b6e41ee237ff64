#!/usr/bin/env bash
# Ours on the GPU after issue 14 step 36's restructuring of impl.kda._chunked (the split pass and the state pass
# as functions of a row range, for the pieces; ours runs one piece, SplitTiles.pieces = 1): the KDA GPU tests and
# ours' KDA checks at new seeds, side by side, 20 examples a check:
#   KDA head dim 128, bounded gate: core seed 44, layer seed 44; softplus: core seed 45; the tiny config: core seed 46
#   OUT=/tmp/out bash scripts/gpu_stop44e.sh
set -u
NAME=${NAME:-stop44e}
PARTS=${PARTS:-verify}
source "$(dirname "$0")/gpu_steps.sh"
if has verify; then
  { tiny_config k128 && tiny_config sp128 softplus; } || exit 1
  export OMP_NUM_THREADS=2
  step tests "${T_TESTS:-280}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_pieces.py \
      tests/test_kda_x_w.py tests/test_kda_aqk_lower.py tests/test_kda_gpu.py tests/test_kda_intra_split.py \
      tests/test_kda_strong_decays.py tests/test_kda_device_report.py &
  CORE="--check kda.chunked --check kda.causal --check kda.paths --check kda.packed --check kda.batch"
  LAYER="--check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths"
  R="--device cuda --examples ${EX:-20} --no-failures"
  step run_k128_core_s44 "${T_GATE:-280}" python3 -m gate.cli run $R --config /tmp/k128 $CORE --seed 44 &
  step run_k128_layer_s44 "${T_GATE:-280}" python3 -m gate.cli run $R --config /tmp/k128 $LAYER --seed 44 &
  step run_sp128_core_s45 "${T_GATE:-280}" python3 -m gate.cli run $R --config /tmp/sp128 $CORE --seed 45 &
  step run_tiny_core_s46 "${T_GATE:-280}" python3 -m gate.cli run $R $CORE --seed 46 &
  wait
fi
echo "=== summary"; cat "$L/summary.txt"
echo "=== tests"; tail -3 "$L/tests.log" | cut -c1-250
for f in "$L"/run_*.log; do echo "-- $f"; grep -E "│ (kda|model)|checks:|FAIL|Error|ILL" "$f" | cut -c1-150; done
true
