#!/usr/bin/env bash
# Stop 41 on the GPU (issue 14): the verdicts owed from stops 39-40, then a measurement of the diagonal-block
# kernel before step 31 is chosen (docs/optimization_log.md, step 31).
#  owed     side by side: kda.scale on ours (owed since step 29); the GPU tests of the split pass, of step 30's
#           candidate and of chunked_ex (the review's kernel edit, _row_at); ours' KDA checks at new seeds on
#           the tiny config with KDA head dim 128 (bounded gate, seed 5: nine checks; softplus gate, seed 6:
#           the five core checks)
#  probe    alone: scripts/kda_diag_probe.py, the diagonal kernel with one stage left out at a time, and
#           under register caps (its device time per call, registers, spills)
#  ncu      Nsight Compute on one launch of ours' diagonal kernel at H = 64, T = 16K: the full set, then its
#           details page and the per-instruction source page (stall samples by SASS line)
#   OUT=/tmp/out PARTS="owed probe ncu" bash scripts/gpu_stop41.sh
set -u
NAME=${NAME:-stop41}
PARTS=${PARTS:-owed probe ncu}
source "$(dirname "$0")/gpu_steps.sh"
if has owed; then
  { tiny_config k128 && tiny_config sp128 softplus; } || exit 1
  export OMP_NUM_THREADS=3
  step scale "${T_SCALE:-420}" python3 -m gate.cli run --device cuda --check kda.scale --examples "${EX:-20}" \
      --seed 0 --no-failures &
  step tests "${T_TESTS:-300}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_gamma_diag.py \
      tests/test_kda_intra_split.py tests/test_kda_device_report.py &
  CORE="--check kda.chunked --check kda.causal --check kda.paths --check kda.packed --check kda.batch"
  LAYER="--check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths"
  RUN="python3 -m gate.cli run --device cuda --examples ${EX:-20} --no-failures"
  step k128_core_s5 "${T_RUN:-420}" $RUN --config /tmp/k128 $CORE --seed 5 &
  step k128_layer_s5 "${T_RUN:-420}" $RUN --config /tmp/k128 $LAYER --seed 5 &
  step sp128_core_s6 "${T_RUN:-420}" $RUN --config /tmp/sp128 $CORE --seed 6 &
  wait
  export OMP_NUM_THREADS=4
fi
has probe && step probe "${T_PROBE:-240}" python3 scripts/kda_diag_probe.py --shapes "${SHAPES:-64:16384,8:16384}" \
    --json "$L/probe.json"
if has ncu; then
  cat > "$L/ncu_one.py" <<'PY'
import torch
from gate.bench_kda import _prefill_inputs
from impl import kda as ik
q, k, v, g, beta = _prefill_inputs(64, 16384)
for _ in range(3):
    ik.chunked_ex(q, k, v, g, beta, None, 64, None, False)
torch.cuda.synchronize()
PY
  step ncu "${T_NCU:-240}" ncu --clock-control none --kernel-name regex:kda_intra_diag --launch-skip 1 \
      --launch-count 1 --set full --import-source yes -f -o "$L/diag" python3 "$L/ncu_one.py"
  step ncu_details 60 ncu --import "$L/diag.ncu-rep" --page details
  step ncu_source 60 ncu --import "$L/diag.ncu-rep" --page source --csv --print-source sass
  rm -f "$L/diag.ncu-rep"; tar czf "$OUT/$NAME.tgz" -C "$OUT" "$NAME"
fi
echo "=== summary"; cat "$L/summary.txt"
has owed && { echo "=== tests"; tail -4 "$L/tests.log" | cut -c1-250;
  for f in "$L"/scale.log "$L"/k128_*.log "$L"/sp128_*.log; do echo "-- $f"; grep -vE "example [0-9]+/" "$f" | tail -16 | cut -c1-200; done; }
has probe && { echo "=== probe"; grep -E "^H=" "$L/probe.log"; }
has ncu && { echo "=== ncu"; grep -E "Duration|Registers|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|Block Limit|Stall|Warp Cycles|Eligible|Memory Throughput|Compute \(SM\)|L1/TEX Hit|L2 Hit|DRAM Throughput" \
    "$L/ncu_details.log" | cut -c1-150 | head -50; wc -l "$L/ncu_source.log"; }
true
