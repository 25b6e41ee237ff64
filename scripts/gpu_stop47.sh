#!/usr/bin/env bash
# Stop 47's GPU call: issue 14 steps 42 / 43 (impl.candidates.mla_merge, mla_merge_uv) gated and timed, and ours
# after step 41 (impl.mla.ROWS_64 = 8) benched:
#  gate43   side by side: the GPU tests of steps 40-43; glmgate gate of step 43's candidate (which runs step 42's
#           merge above 2 query rows) against ours, 20 examples a check: mla.absorbed + mla.batch at seed 60,
#           mla.absorbed + absorbed_paged at 61, mla.paths / causal / graph_replay / model.paths at 60
#  probe    alone after: scripts/mla_merge_probe.py (attend: ours / step 42 / step 43, B = 1-128)
#  bench    glmgate bench --mechanism mla (ours after step 41)
#   OUT=/tmp/out bash scripts/gpu_stop47.sh
set -u
NAME=${NAME:-stop47}
PARTS=${PARTS:-gate43 probe bench}
source "$(dirname "$0")/gpu_steps.sh"
if has gate43; then
  export OMP_NUM_THREADS=3
  step tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge.py tests/test_mla_heads64.py &
  G="--device cuda --candidate impl.candidates.mla_merge_uv:Candidate --baseline triton --examples 20 --no-failures"
  step gate43_s60 200 python3 -m gate.cli gate $G --check mla.absorbed --check mla.batch --seed 60 &
  step gate43_s61 200 python3 -m gate.cli gate $G --check mla.absorbed --check mla.absorbed_paged --seed 61 &
  step gate43_2_s60 200 python3 -m gate.cli gate $G --check mla.paths --check mla.causal --check mla.graph_replay \
      --check model.paths --seed 60 &
  wait
fi
has probe && [ "$SECONDS" -lt 300 ] && step probe 120 python3 scripts/mla_merge_probe.py --json "$L/probe.json"
has bench && [ "$SECONDS" -lt 400 ] && step bench_mla 90 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
echo "=== summary"; cat "$L/summary.txt"
has gate43 && { tail -3 "$L/tests.log" | cut -c1-200;
  for f in "$L"/gate43_*.log; do echo "-- $f"; grep -E "│ (mla|model|dsa)|checks:|FAIL|Error|REGRESSION" "$f" | cut -c1-200; done; }
has probe && { echo "=== probe"; grep -vE "rel-L2" "$L/probe.log" | cut -c1-160; grep -E "rel-L2" "$L/probe.log" | cut -c1-120 | head -30; }
has bench && { echo "=== bench_mla"; grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -24 | cut -c1-200; }
true
