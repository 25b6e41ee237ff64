#!/usr/bin/env bash
# Issue 14 step 38 landed (ours: the sparse MLA kernel's next block's entries a block ahead, the same bits) on the GPU:
#  verify38  side by side: the GPU tests (ours' bits against prefetch=False in bf16 at r_kv 512, 2051 entries); ours'
#            MLA checks at seeds 47 and 48, 20 examples a check (their CUDA pins at the full geometry included); the
#            GPU zoo of the step's mutant
#  probe38   alone, after the verdicts: scripts/mla_prefetch_probe.py (ours against prefetch=False, 5 repeats)
#   OUT=/tmp/out bash scripts/gpu_stop44g.sh
set -u
NAME=${NAME:-stop44g}
PARTS=${PARTS:-verify38 probe38}
source "$(dirname "$0")/gpu_steps.sh"
if has verify38; then
  export OMP_NUM_THREADS=2
  step tests38 "${T_TESTS:-240}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_prefetch.py &
  MLA="--check mla.absorbed --check mla.paths --check mla.causal --check mla.absorbed_paged --check mla.batch"
  MLA2="--check mla.rerun --check mla.graph_replay --check model.paths"
  R="--device cuda --examples ${EX:-20} --no-failures"
  step run38_mla_s47 "${T_GATE:-240}" python3 -m gate.cli run $R $MLA --seed 47 &
  step run38_mla_s48 "${T_GATE:-240}" python3 -m gate.cli run $R $MLA --seed 48 &
  step run38_mla2_s47 "${T_GATE:-240}" python3 -m gate.cli run $R $MLA2 --seed 47 &
  step zoo38 "${T_ZOO:-240}" python3 -m gate.cli zoo --device cuda --mutant mla_prefetch_skips_a_block &
  wait
  export OMP_NUM_THREADS=4
fi
has probe38 && step probe38 "${T_PROBE:-150}" python3 scripts/mla_prefetch_probe.py --repeats "${REPEATS:-5}" \
    --json "$L/probe38.json"
echo "=== summary"; cat "$L/summary.txt"
has verify38 && { echo "=== tests38"; tail -2 "$L/tests38.log" | cut -c1-200; echo "=== zoo38"; tail -5 "$L/zoo38.log" | cut -c1-200;
  for f in "$L"/run38_*.log; do echo "-- $f"; grep -E "│ (mla|model|dsa)|checks:|FAIL|Error" "$f" | cut -c1-150; done; }
has probe38 && { echo "=== probe38"; grep -E "copy ceiling|bits|us \[|Error" "$L/probe38.log" | cut -c1-160; }
true
