#!/usr/bin/env bash
# Stop 46's third GPU call: step 41's candidate from 8 query rows on (impl.candidates.mla_heads64_small, ROWS_64 = 8;
# its first form, from 2 rows, was flagged by the gate on mla.batch) and the KDA bench's fla-step check fixed:
#  gate41b  side by side: the GPU tests; glmgate gate of the candidate against ours, 20 examples a check: mla.batch
#           (with its new pins crossing 8 and 16 rows) and mla.absorbed at seeds 56 and 57; mla.paths / causal /
#           absorbed_paged / graph_replay / model.paths at 56
#  kda      alone after: scripts/mla_b1_profile.py (where sparse MLA's B = 1 time goes); glmgate bench --mechanism kda --skip-prefill (fla's step held to the oracle from the
#           state before the in-place timed launches)
#   OUT=/tmp/out bash scripts/gpu_stop46c.sh
set -u
NAME=${NAME:-stop46c}
PARTS=${PARTS:-gate41b kda}
source "$(dirname "$0")/gpu_steps.sh"
if has gate41b; then
  export OMP_NUM_THREADS=3
  step tests41 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_heads64.py &
  G="--device cuda --candidate impl.candidates.mla_heads64_small:Candidate --baseline triton --examples 20 --no-failures"
  step gate41b_s56 180 python3 -m gate.cli gate $G --check mla.batch --check mla.absorbed --seed 56 &
  step gate41b_s57 180 python3 -m gate.cli gate $G --check mla.batch --check mla.absorbed --seed 57 &
  step gate41b_2_s56 180 python3 -m gate.cli gate $G --check mla.paths --check mla.causal --check mla.absorbed_paged \
      --check mla.graph_replay --check model.paths --seed 56 &
  wait
fi
has kda && [ "$SECONDS" -lt 230 ] && step b1_profile 40 python3 scripts/mla_b1_profile.py
has kda && [ "$SECONDS" -lt 180 ] && step bench_kda 80 python3 -m gate.cli bench --mechanism kda -- --skip-prefill --json "$L/bench_kda.json"
echo "=== summary"; cat "$L/summary.txt"
has gate41b && { tail -2 "$L/tests41.log" | cut -c1-200;
  for f in "$L"/gate41b_*.log; do echo "-- $f"; grep -E "│ (mla|model|dsa)|checks:|FAIL|Error|REGRESSION" "$f" | cut -c1-200; done; }
has kda && { echo "=== b1_profile"; cut -c1-160 "$L/b1_profile.log"; echo "=== bench_kda"; grep -vE "^\s*$|Warn|warn" "$L/bench_kda.log" | tail -20 | cut -c1-200; }
true
