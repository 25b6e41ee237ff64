#!/usr/bin/env bash
# Stop 47's second GPU call: issue 14 step 42 (impl.candidates.mla_merge: the split merge in one pass, in the
# caller's dtype) gated, then, if every gate passed, landed on the device's tree (the patch .whl/step42.patch is
# the landing commit) and ours checked and benched:
#  gate42   glmgate gate of the candidate against ours, 20 examples a check: mla.absorbed + mla.batch at seeds 62
#           and 63, mla.absorbed_paged / graph_replay / paths / causal at 62 (side by side)
#  land     git apply the landing; the GPU tests of the MLA kernels; glmgate zoo --device cuda on the five MLA
#           kernel mutants; glmgate bench --mechanism mla
#   OUT=/tmp/out bash scripts/gpu_stop47b.sh
set -u
NAME=${NAME:-stop47b}
PARTS=${PARTS:-gate42 land}
source "$(dirname "$0")/gpu_steps.sh"
if has gate42; then
  export OMP_NUM_THREADS=4
  G="--device cuda --candidate impl.candidates.mla_merge:Candidate --baseline triton --examples 20 --no-failures"
  step gate42_s62 200 python3 -m gate.cli gate $G --check mla.absorbed --check mla.batch --seed 62 &
  step gate42_s63 200 python3 -m gate.cli gate $G --check mla.absorbed --check mla.batch --seed 63 &
  step gate42_2_s62 200 python3 -m gate.cli gate $G --check mla.absorbed_paged --check mla.graph_replay \
      --check mla.paths --check mla.causal --seed 62 &
  wait
fi
PASS=1
for f in "$L"/gate42_*.log; do grep -q "0 failed, 0 regressions, 0 not covered, 0 errors, 0 not run" "$f" || PASS=0; done
echo "gate42 all passed: $PASS" | tee -a "$L/summary.txt"
if has land && [ "$PASS" = 1 ]; then
  { git apply .whl/step42.patch || patch -p1 < .whl/step42.patch; } && echo "landed on the device's tree" | tee -a "$L/summary.txt"
  step tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge.py tests/test_mla_heads64.py \
      tests/test_mla_prefetch.py &
  step zoo 200 python3 -m gate.cli zoo --device cuda --mutant mla_combine_drops_last_split \
      --mutant mla_split_empty_lse_zero --mutant mla_online_softmax_no_rescale --mutant mla_prefetch_skips_a_block \
      --mutant mla_paged_first_row_table &
  wait
  [ "$SECONDS" -lt 480 ] && step bench_mla 90 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
fi
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate42_*.log; do echo "-- $f"; grep -E "│ (mla|model|dsa)|checks:|FAIL|Error|REGRESSION" "$f" | cut -c1-200; done
[ -f "$L/tests.log" ] && tail -3 "$L/tests.log" | cut -c1-200
[ -f "$L/zoo.log" ] && grep -E "caught|escaped|not run|error" "$L/zoo.log" | cut -c1-120 | tail -12
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -12 | cut -c1-200
true
