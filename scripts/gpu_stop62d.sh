#!/usr/bin/env bash
# Issue 14 step 58 gated and its landed tree checked side by side in one short call (~350 s; failed machine starts
# left the session less device time than a gate and a landing one after the other): on this tree its gate (seeds 112, 113,
# mla.causal at 112; 20 examples a check), the MLA GPU tests and its mutant; at once, on a copy with step58.patch
# applied (/tmp/landed), ours' matrix at seed 114 (12 examples a check), the four producer mutants of its landing list
# and the GPU tests; then the probe (ours2 / stageo, and step 59's partstaged timed, not gated), the verdict
# (scripts/stop60_verdict.py, the rule of docs/optimization_log.md "Step 58") and the bench on the landed copy.
#   LIMIT=350 OUT=/tmp/out bash scripts/gpu_stop62d.sh
set -u
NAME=${NAME:-stop62d}
LIMIT=${LIMIT:-350}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
landed_copy step58
G="--device cuda --baseline triton --examples 20 --no-failures --candidate impl.candidates.mla_stage_o:Candidate"
CHECKS="--check mla.absorbed --check mla.batch --check mla.absorbed_paged --check mla.paths --check mla.graph_replay"
P1=$((LIMIT - 110))
for s in 112 113; do step gate58_s$s $P1 python3 -m gate.cli gate $G $CHECKS --seed $s & done
step gate58_2_s112 $P1 python3 -m gate.cli gate $G --check mla.causal --seed 112 &
step tests $P1 python3 -m pytest -q -p no:cacheprovider -m gpu $MLA_GPU_TESTS &
step zoo58 $P1 python3 -m gate.cli zoo --device cuda --mutant mla_producer_staged_store_drops_heads &
R="--device cuda --examples 12 --no-failures --seed 114"
step matrix_s114 $P1 $LANDED python3 -m gate.cli run $R --check mla.absorbed --check mla.batch \
    --check mla.absorbed_paged --check mla.graph_replay &
step matrix_2_s114 $P1 $LANDED python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths &
step zool $P1 $LANDED python3 -m gate.cli zoo --device cuda --mutant mla_producer_staged_store_drops_heads \
    --mutant mla_producer_out_uv_unnormalized --mutant mla_producer_empty_lse_zero --mutant mla_producer_no_rescale &
step testsl $P1 $LANDED python3 -m pytest -q -p no:cacheprovider -m gpu $MLA_GPU_TESTS &
wait
step probe 75 python3 scripts/mla_q_probe.py --forms ours2,stageo,partstaged \
    --shapes 1x131072,1x32768,8x32768,16x32768,32x32768,64x32768,128x32768,256x32768 --json "$L/probe.json"
python3 scripts/stop60_verdict.py "$L" 2>&1 | tee -a "$L/summary.txt"
landed_verdict step58 4
[ "$SECONDS" -lt $((LIMIT - 25)) ] && step bench_mla 25 $LANDED python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
report tests testsl
