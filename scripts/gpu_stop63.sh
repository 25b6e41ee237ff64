#!/usr/bin/env bash
# Issue 14 after scripts/gpu_stop62.sh (~450 s): the landing of the steps its verdicts passed, and step 60 gated on
# that tree.
#   LAND="step58 step59" (the patches to apply, in order; step59.patch is made on step 58's tree): applied on the
#   device's tree, then ours' matrix at seed 114, the MLA mutants those steps touch, the MLA GPU tests, the bench;
#   beside them step 60 (impl.candidates.mla_merge_pdl, now ours + MERGE_PDL) gated at seeds 118 and 119 (+ mla.causal
#   at 118), its GPU tests and mutant, its probe on the landed tree, and scripts/stop63_verdict.py (its rule in
#   docs/optimization_log.md "Step 60", written before stop 62)
#   LAND="step58 step59" OUT=/tmp/out bash scripts/gpu_stop63.sh
set -u
NAME=${NAME:-stop63}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
n=0
for p in ${LAND:-}; do git apply "scripts/patches/$p.patch" && n=$((n + 1)) && echo "applied on the device's tree: $p.patch" \
    | tee -a "$L/summary.txt"; done
R="--device cuda --examples 20 --no-failures --seed 114"
step matrix_s114 330 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
    --check mla.graph_replay &
step matrix_2_s114 330 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths &
MUT="--mutant mla_producer_staged_store_drops_heads --mutant mla_producer_out_uv_unnormalized
     --mutant mla_producer_empty_lse_zero --mutant mla_producer_no_rescale --mutant mla_producer_staged_partials_drop_heads
     --mutant mla_combine_bf16_drops_last_split --mutant mla_split_empty_lse_zero"
step zool 240 python3 -m gate.cli zoo --device cuda $MUT &
TESTS="tests/test_mla_q_strides.py tests/test_mla_out_uv.py tests/test_mla_producer.py tests/test_mla_heads64.py
       tests/test_mla_prefetch.py tests/test_mla_merge.py tests/test_mla_stage_o.py"
step testsl 240 python3 -m pytest -q -p no:cacheprovider -m gpu $TESTS &
G="--device cuda --baseline triton --examples 20 --no-failures --candidate impl.candidates.mla_merge_pdl:Candidate"
CHECKS="--check mla.absorbed --check mla.batch --check mla.absorbed_paged --check mla.paths --check mla.graph_replay"
for s in 118 119; do step gate60_s$s 330 python3 -m gate.cli gate $G $CHECKS --seed $s & done
step gate60_2_s118 330 python3 -m gate.cli gate $G --check mla.causal --seed 118 &
step tests60 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge_pdl.py &
step zoo60 240 python3 -m gate.cli zoo --device cuda --mutant mla_merge_pdl_no_wait &
wait
[ "$SECONDS" -lt 470 ] && step bench_mla 40 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
[ "$SECONDS" -lt 500 ] && step probe60 90 python3 scripts/mla_q_probe.py --forms ours2,pdl \
    --shapes 1x131072,1x32768,4x32768,16x32768,32x32768,64x32768 --json "$L/probe60.json"
python3 scripts/stop63_verdict.py "$L" 2>&1 | tee -a "$L/summary.txt"
M=$(matrix_passed); TW=$(tests_passed "$L/testsl.log"); Z=$(caught_in "$L/zool.log")
echo "landed tree ($n patches): matrix passed $M; mutants caught $Z of 7; tests $TW; commit: $([ $M = 1 ] && [ "$Z" = 7 ] && [ $TW = 1 ] && echo 1 || echo 0)" \
    | tee -a "$L/summary.txt"
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && grep -E "REGRESSION|FAIL" "$f" | head -3 | cut -c1-220; done
for f in testsl tests60; do echo "$f: $(tail -1 "$L/$f.log" | cut -c1-200)"; done
cat "$L"/zoo*.log | grep -E "^│ [a-z]" | cut -c1-90
[ -f "$L/probe60.log" ] && grep -E "us \[|device|oracle|Error" "$L/probe60.log" | cut -c1-200
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -10 | cut -c1-200
true
