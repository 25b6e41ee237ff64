#!/usr/bin/env bash
# Issue 14 steps 58 and 59 gated in one call (~400 s; scripts/gpu_stop60.sh and 61.sh's gating halves, the device time
# left after two machines that did not start would not hold both whole calls), then step 60 timed:
#   step 58 (impl.candidates.mla_stage_o) against ours at seeds 112 and 113 (+ mla.causal at 112), step 59
#   (impl.candidates.mla_part_bf16_staged) at seeds 115 and 116 (+ mla.causal at 115), the MLA GPU tests, each step's
#   mutants on cuda, one probe (ours / ours2 / stageo / partstaged over the union of both rules' shapes), both
#   verdicts (scripts/stop60_verdict.py and 61's, each on its own rule's shapes, written before this call); then
#   step 60 (impl.candidates.mla_merge_pdl): its GPU tests and its mutant (an early look: its rule is applied on the
#   landed tree, scripts/gpu_stop63.sh)
#   OUT=/tmp/out bash scripts/gpu_stop62.sh
set -u
NAME=${NAME:-stop62}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
G="--device cuda --baseline triton --examples 20 --no-failures"
C58="--candidate impl.candidates.mla_stage_o:Candidate"
C59="--candidate impl.candidates.mla_part_bf16_staged:Candidate"
CHECKS="--check mla.absorbed --check mla.batch --check mla.absorbed_paged --check mla.paths --check mla.graph_replay"
for s in 112 113; do step gate58_s$s 330 python3 -m gate.cli gate $G $C58 $CHECKS --seed $s & done
step gate58_2_s112 330 python3 -m gate.cli gate $G $C58 --check mla.causal --seed 112 &
for s in 115 116; do step gate59_s$s 330 python3 -m gate.cli gate $G $C59 $CHECKS --seed $s & done
step gate59_2_s115 330 python3 -m gate.cli gate $G $C59 --check mla.causal --seed 115 &
TESTS="tests/test_mla_q_strides.py tests/test_mla_out_uv.py tests/test_mla_producer.py tests/test_mla_heads64.py
       tests/test_mla_prefetch.py tests/test_mla_merge.py tests/test_mla_stage_o.py"
step tests 240 python3 -m pytest -q -p no:cacheprovider -m gpu $TESTS &
step tests60 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge_pdl.py &
step zoo58 240 python3 -m gate.cli zoo --device cuda --mutant mla_producer_staged_store_drops_heads &
step zoo59 240 python3 -m gate.cli zoo --device cuda --mutant mla_producer_staged_partials_drop_heads \
    --mutant mla_combine_bf16_drops_last_split &
step zoo60 240 python3 -m gate.cli zoo --device cuda --mutant mla_merge_pdl_no_wait &
wait
step probe 150 python3 scripts/mla_q_probe.py --forms ours2,stageo,partstaged \
    --shapes 1x131072,1x32768,4x32768,8x32768,16x32768,32x32768,64x32768,128x32768,256x32768 --json "$L/probe.json"
python3 scripts/stop60_verdict.py "$L" 2>&1 | tee -a "$L/summary.txt"
python3 scripts/stop61_verdict.py "$L" 2>&1 | tee -a "$L/summary.txt"
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/gate*.log; do [ -f "$f" ] && grep -E "REGRESSION|FAIL" "$f" | head -3 | cut -c1-220; done
echo "tests: $(tail -1 "$L/tests.log" | cut -c1-200)"
echo "tests60: $(tail -1 "$L/tests60.log" | cut -c1-200)"
grep -E "FAILED|Error" "$L/tests60.log" | head -5 | cut -c1-200
cat "$L"/zoo*.log | grep -E "^│ [a-z]" | cut -c1-90
for f in probe probe60; do [ -f "$L/$f.log" ] && grep -E "us \[|device|oracle|Error" "$L/$f.log" | cut -c1-200; done
true
