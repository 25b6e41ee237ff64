#!/usr/bin/env bash
# Stop 46's second GPU call, after step 40 landed (ours: 64 heads a program from 16 query rows on):
#  check40   side by side: the GPU tests of the landed launch (and step 41's candidate) and step 38's bits; glmgate
#            gate of step 41's candidate (impl.candidates.mla_heads64_small: the launch from 2 rows on) against ours,
#            20 examples a check: the MLA checks at seeds 54 and 55, mla.rerun / graph_replay / model.paths at 54
#  bench     alone, each after the other: glmgate bench --mechanism mla (with --sweep), scripts/mla_small_b_probe.py
#            (below 16 rows: 64- and 32-head programs against ours), glmgate bench --mechanism kda (fla-core 0.6.0
#            and einops on PYTHONPATH: the decode table's fla-step column has not run before)
#   OUT=/tmp/out bash scripts/gpu_stop46b.sh
set -u
NAME=${NAME:-stop46b}
PARTS=${PARTS:-check40 bench}
source "$(dirname "$0")/gpu_steps.sh"
if has check40; then
  export OMP_NUM_THREADS=3
  step tests40b 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_heads64.py tests/test_mla_prefetch.py &
  MLA="--check mla.absorbed --check mla.paths --check mla.causal --check mla.absorbed_paged --check mla.batch"
  MLA2="--check mla.rerun --check mla.graph_replay --check model.paths"
  G="--device cuda --candidate impl.candidates.mla_heads64_small:Candidate --baseline triton --examples 20 --no-failures"
  step gate41_s54 300 python3 -m gate.cli gate $G $MLA --seed 54 &
  step gate41_s55 300 python3 -m gate.cli gate $G $MLA --seed 55 &
  step gate41_2_s54 300 python3 -m gate.cli gate $G $MLA2 --seed 54 &
  wait
fi
if has bench; then
  step bench_mla 240 python3 -m gate.cli bench --mechanism mla -- --sweep --mem-gib 60 --json "$L/bench_mla.json"
  # the call's 600 s: the small-B probe and the KDA bench only where they fit
  [ "$SECONDS" -lt 440 ] && step small 120 python3 scripts/mla_small_b_probe.py --json "$L/small.json"
  [ "$SECONDS" -lt 360 ] && step bench_kda 200 python3 -m gate.cli bench --mechanism kda -- --json "$L/bench_kda.json"
fi
echo "=== summary"; cat "$L/summary.txt"
has check40 && { tail -2 "$L/tests40b.log" | cut -c1-200; for f in "$L"/gate41_*.log; do echo "-- $f"; grep -E "│ (mla|model|dsa)|checks:|FAIL|Error" "$f" | cut -c1-170; done; }
has bench && { echo "=== bench_mla"; grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -40 | cut -c1-200;
  echo "=== small"; grep -E "copy|rel-L2|us \[" "$L/small.log" | cut -c1-170;
  echo "=== bench_kda"; grep -vE "^\s*$|Warn|warn" "$L/bench_kda.log" | tail -40 | cut -c1-200; }
true
