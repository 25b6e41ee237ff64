#!/usr/bin/env bash
# Issue 14 step 59 gated and its landed tree checked side by side in one short call (~320 s; failed machine starts
# left the session too little device time for scripts/gpu_stop61.sh's gate-then-land order): on this tree its gate
# (seeds 115, 116, mla.causal at 115; 20 examples a check), the MLA GPU tests and its two mutants; at once, on a copy
# with step59.patch applied (/tmp/landed), ours' matrix at seed 117 (20 examples a check), the four mutants of its
# landing list and the GPU tests; apart from step 59's verdict, step 60's GPU tests and race mutant (not run since its
# review); then the probe (ours2 / partstaged), the verdict (scripts/stop61_verdict.py, the rule of
# docs/optimization_log.md "Step 59") and the bench on the landed copy.
#   OUT=/tmp/out bash scripts/gpu_stop63.sh          (LIMIT=450: ~320 s on an H100; run it with a 500 s timeout)
# shorter (less device time left): EX=12 (the landed copy's matrix examples a check), EXTRAS=0 (no step 60 parts).
# Not below LIMIT=450: stop 63 ran it at LIMIT=280 (180 s for the parallel part) and the two main gates, each the
# candidate's pass then the peer's, were cut in the peer's pass (8 processes on one H100: ~2x their time alone, where
# a gate of the five checks takes ~130 s); the landed copy's four mutants took longer than 180 s too
set -u
NAME=${NAME:-stop63}
LIMIT=${LIMIT:-450}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
landed_copy step59
G="--device cuda --baseline triton --examples 20 --no-failures --candidate impl.candidates.mla_part_bf16_staged:Candidate"
CHECKS="--check mla.absorbed --check mla.batch --check mla.absorbed_paged --check mla.paths --check mla.graph_replay"
P1=$((LIMIT - 100))
for s in 115 116; do step gate59_s$s $P1 python3 -m gate.cli gate $G $CHECKS --seed $s & done
step gate59_2_s115 $P1 python3 -m gate.cli gate $G --check mla.causal --seed 115 &
step tests $P1 python3 -m pytest -q -p no:cacheprovider -m gpu $MLA_GPU_TESTS &
step zoo59 $P1 python3 -m gate.cli zoo --device cuda --mutant mla_producer_staged_partials_drop_heads \
    --mutant mla_combine_bf16_drops_last_split &
if [ "${EXTRAS:-1}" = 1 ]; then
  step tests60 $P1 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge_pdl.py &
  step zoo60 $P1 python3 -m gate.cli zoo --device cuda --mutant mla_merge_pdl_no_wait &
fi
R="--device cuda --examples ${EX:-20} --no-failures --seed 117"
step matrix_s117 $P1 $LANDED python3 -m gate.cli run $R --check mla.absorbed --check mla.batch \
    --check mla.absorbed_paged --check mla.graph_replay &
step matrix_2_s117 $P1 $LANDED python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths &
step zool $P1 $LANDED python3 -m gate.cli zoo --device cuda --mutant mla_producer_staged_partials_drop_heads \
    --mutant mla_combine_bf16_drops_last_split --mutant mla_producer_empty_lse_zero --mutant mla_split_empty_lse_zero &
step testsl $P1 $LANDED python3 -m pytest -q -p no:cacheprovider -m gpu $MLA_GPU_TESTS &
wait
step probe 75 python3 scripts/mla_q_probe.py --forms ours2,partstaged \
    --shapes 1x131072,1x32768,4x32768,8x32768,16x32768,32x32768,64x32768,128x32768 --json "$L/probe.json"
python3 scripts/stop61_verdict.py "$L" 2>&1 | tee -a "$L/summary.txt"
landed_verdict step59 4
[ "$SECONDS" -lt $((LIMIT - 25)) ] && step bench_mla 25 $LANDED python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
report tests testsl tests60
