#!/usr/bin/env bash
# Stop 43's last GPU call: the kda.paths bf16 false alarm (a self-consistency bound below the example's own rounding
# sensitivity) after the fix (Comparison.conditioning), and H = 8's bench after steps 33-35.
#  paths43  side by side: the shrunk case's repro on the GPU; kda.paths of ours with the softplus gate at seed 28
#           (where stop 43c failed it) and with the bounded gate at seed 30, 25 examples; the GPU zoo of the
#           kda.paths mutant
#  bench8   alone: ours_ex against step33_ex beside fla's two paths, H = 8, T = 16K, 5 alternating repeats
#   OUT=/tmp/out PARTS="paths43 bench8" bash scripts/gpu_stop43d.sh
set -u
NAME=${NAME:-stop43d}
PARTS=${PARTS:-paths43 bench8}
source "$(dirname "$0")/gpu_steps.sh"
if has paths43; then
  { tiny_config k128 && tiny_config sp128 softplus; } || exit 1
  export OMP_NUM_THREADS=3
  step repro43 "${T_GATE:-200}" python3 -m gate.cli repro '{"check":"kda.paths","impl":"triton","device":"cuda","dtype":"bfloat16","case":{"type":"SublayerCase","geometry":{"heads":1,"head_dim":16,"hidden":32,"conv_width":4,"lower_bound":null},"batch":1,"length":9,"left_pad":[8],"splits":[8,1],"initial_state":false,"family":"normal","seed":4}}' &
  step paths_sp128_s28 "${T_GATE:-200}" python3 -m gate.cli run --device cuda --config /tmp/sp128 --check kda.paths \
      --seed 28 --examples "${EX:-25}" --no-failures &
  step paths_k128_s30 "${T_GATE:-200}" python3 -m gate.cli run --device cuda --config /tmp/k128 --check kda.paths \
      --seed 30 --examples "${EX:-25}" --no-failures &
  step zoo43d "${T_GATE:-200}" python3 -m gate.cli zoo --device cuda --mutant kda_conv_state_not_carried &
  wait
  export OMP_NUM_THREADS=4
fi
has bench8 && step bench8 "${T_BENCH:-150}" python3 scripts/kda_prefill_variants.py --shapes "${SHAPES:-8:16384}" \
    --repeats "${REPEATS:-5}" --variants "${VARIANTS:-ours_ex,step33_ex}" --breakdown "${BREAKDOWN:-3}" \
    --json "$L/bench8.json"
echo "=== summary"; cat "$L/summary.txt"
has paths43 && { echo "=== repro43"; grep -E "output_vs_prefill|FAIL|broke" "$L/repro43.log" | cut -c1-330;
  echo "=== zoo43d"; grep -E "^│ kda|ESCAPED" "$L/zoo43d.log" | cut -c1-120;
  for f in "$L"/paths_*.log; do echo "-- $f"; grep -E "│ kda\.|checks:|FAIL|Error" "$f" | cut -c1-130; done; }
has bench8 && { echo "=== bench8"; grep -E "REFUSED|ms \[" "$L/bench8.log" | cut -c1-170; }
true
