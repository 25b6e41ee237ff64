#!/usr/bin/env bash
# Issue 14 step 40 (impl.candidates.mla_heads64: the sparse MLA kernel with 64 heads a program, entry blocks of 32,
# 3 stages and one wave of splits from 16 query rows on) on the GPU:
#  verify40  side by side: the GPU tests (the candidate in bf16 at r_kv 512 and 2051 entries against a float64
#            reference, its paged cache the contiguous bits; step 38's bits); glmgate gate of the candidate against
#            ours, 20 examples a check: mla.absorbed / paths / causal / absorbed_paged / batch at seeds 51 and 52
#            (with the pins of 16 query rows at the released geometry), mla.rerun / graph_replay / model.paths at
#            seed 51; the kernel's static compile on this machine's Triton (registers, spill)
#  probe40   alone, after the verdicts: scripts/mla_step40_probe.py (decode B = 16-256, paged, B = 1 / 4 / 8)
#   OUT=/tmp/out bash scripts/gpu_stop46.sh
set -u
NAME=${NAME:-stop46}
PARTS=${PARTS:-verify40 probe40}
source "$(dirname "$0")/gpu_steps.sh"
if has verify40; then
  export OMP_NUM_THREADS=2
  step tests40 "${T_TESTS:-240}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_heads64.py \
      tests/test_mla_prefetch.py &
  MLA="--check mla.absorbed --check mla.paths --check mla.causal --check mla.absorbed_paged --check mla.batch"
  MLA2="--check mla.rerun --check mla.graph_replay --check model.paths"
  G="--device cuda --candidate impl.candidates.mla_heads64:Candidate --baseline triton --examples ${EX:-20} --no-failures"
  step gate40_s51 "${T_GATE:-300}" python3 -m gate.cli gate $G $MLA --seed 51 &
  step gate40_s52 "${T_GATE:-300}" python3 -m gate.cli gate $G $MLA --seed 52 &
  step gate40_2_s51 "${T_GATE:-300}" python3 -m gate.cli gate $G $MLA2 --seed 51 &
  step kernels40 120 python3 -m gate.compile_check --kernel mla_sparse_absorbed_fwd_kernel &
  wait
  export OMP_NUM_THREADS=4
fi
has probe40 && step probe40 "${T_PROBE:-200}" python3 scripts/mla_step40_probe.py --repeats "${REPEATS:-5}" \
    --json "$L/probe40.json"
echo "=== summary"; cat "$L/summary.txt"
has verify40 && { echo "=== tests40"; tail -2 "$L/tests40.log" | cut -c1-200; echo "=== kernels40";
  grep -E "mla_|FAIL|Error" "$L/kernels40.log" | cut -c1-120;
  for f in "$L"/gate40_*.log; do echo "-- $f"; grep -E "│ (mla|model|dsa)|checks:|FAIL|Error" "$f" | cut -c1-170; done; }
has probe40 && { echo "=== probe40"; grep -E "copy ceiling|bits|oracle|rel-L2|us \[|Error|REFUSED" "$L/probe40.log" | cut -c1-170; }
true
