#!/usr/bin/env bash
# Issue 14 step 39 (step 16's candidate as ours: the KDA decode splits a head's value blocks over programs while
# B·H < 2 · SMs) on the GPU, owed by stop 44 (its device budget ran out before this call):
#  verify39  side by side: the GPU tests (every split the bits of one program a head, in place and not); glmgate
#            gate of impl.candidates.kda_decode_split against ours, 20 examples a check: head dim 128 bounded at
#            seed 49, the tiny config at seed 50
#  probe39   alone, after the verdicts: scripts/kda_decode_probe.py (ours, the candidate, value blocks of 32, fla;
#            CUDA graphs, 5 alternating repeats, B = 1 / 2 / 4 / 16 / 64 / 256)
# If both gates pass and the probe holds, step 39 lands as commit 4b4bc37 made it (reverted in stop 44): decode's
# vs None means "auto", tests/test_kda_decode_split.py and the kernel path of the split follow
#   OUT=/tmp/out bash scripts/gpu_stop44h.sh
set -u
NAME=${NAME:-stop44h}
PARTS=${PARTS:-verify39 probe39}
source "$(dirname "$0")/gpu_steps.sh"
if has verify39; then
  tiny_config k128 || exit 1
  export OMP_NUM_THREADS=2
  step tests39 "${T_TESTS:-200}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_decode_split.py \
      tests/test_kda_gpu.py &
  DEC="--check kda.decode --check kda.paths --check kda.sublayer --check kda.batch"
  G="--device cuda --candidate impl.candidates.kda_decode_split:Candidate --baseline triton --examples ${EX:-20}"
  step gate39_k128_s49 "${T_GATE:-200}" python3 -m gate.cli gate $G --config /tmp/k128 $DEC --seed 49 &
  step gate39_tiny_s50 "${T_GATE:-200}" python3 -m gate.cli gate $G $DEC --seed 50 &
  wait
  export OMP_NUM_THREADS=4
fi
has probe39 && step probe39 "${T_PROBE:-150}" python3 scripts/kda_decode_probe.py --repeats "${REPEATS:-5}" \
    --json "$L/probe39.json"
echo "=== summary"; cat "$L/summary.txt"
has verify39 && { echo "=== tests39"; tail -2 "$L/tests39.log" | cut -c1-200;
  for f in "$L"/gate39_*.log; do echo "-- $f"; grep -E "│ (kda|model)|checks:|FAIL|Error" "$f" | cut -c1-150; done; }
has probe39 && { echo "=== probe39"; grep -E "bits|us \[|Error" "$L/probe39.log" | cut -c1-170; }
true
