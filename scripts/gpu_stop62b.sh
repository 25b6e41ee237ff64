#!/usr/bin/env bash
# Issue 14 steps 58 and 59 gated AND landed in one call (~580 s): scripts/gpu_stop62.sh's gating (without step 60's
# early look) and, where the verdicts pass and time is left, scripts/gpu_stop63.sh's landing checks (without step 60),
# because failed machine starts left the session's device time for one call, not two.
#   OUT=/tmp/out bash scripts/gpu_stop62b.sh
set -u
NAME=${NAME:-stop62b}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
G="--device cuda --baseline triton --examples 20 --no-failures"
C58="--candidate impl.candidates.mla_stage_o:Candidate"
C59="--candidate impl.candidates.mla_part_bf16_staged:Candidate"
CHECKS="--check mla.absorbed --check mla.batch --check mla.absorbed_paged --check mla.paths --check mla.graph_replay"
for s in 112 113; do step gate58_s$s 300 python3 -m gate.cli gate $G $C58 $CHECKS --seed $s & done
step gate58_2_s112 300 python3 -m gate.cli gate $G $C58 --check mla.causal --seed 112 &
for s in 115 116; do step gate59_s$s 300 python3 -m gate.cli gate $G $C59 $CHECKS --seed $s & done
step gate59_2_s115 300 python3 -m gate.cli gate $G $C59 --check mla.causal --seed 115 &
TESTS="tests/test_mla_q_strides.py tests/test_mla_out_uv.py tests/test_mla_producer.py tests/test_mla_heads64.py
       tests/test_mla_prefetch.py tests/test_mla_merge.py tests/test_mla_stage_o.py"
step tests 240 python3 -m pytest -q -p no:cacheprovider -m gpu $TESTS &
step zoo58 240 python3 -m gate.cli zoo --device cuda --mutant mla_producer_staged_store_drops_heads &
step zoo59 240 python3 -m gate.cli zoo --device cuda --mutant mla_producer_staged_partials_drop_heads \
    --mutant mla_combine_bf16_drops_last_split &
wait
step probe 120 python3 scripts/mla_q_probe.py --forms ours2,stageo,partstaged --repeats 5 \
    --shapes 1x131072,1x32768,4x32768,8x32768,16x32768,32x32768,64x32768,128x32768,256x32768 --json "$L/probe.json"
python3 scripts/stop60_verdict.py "$L" 2>&1 | tee -a "$L/summary.txt"
python3 scripts/stop61_verdict.py "$L" 2>&1 | tee -a "$L/summary.txt"
LAND=""
grep -q "^lands: step58" "$L/summary.txt" && LAND="step58"
[ -n "$LAND" ] && grep -q "^lands: step59" "$L/summary.txt" && LAND="step58 step59"
if [ -n "$LAND" ] && [ "$SECONDS" -lt 430 ]; then
  for p in $LAND; do git apply "scripts/patches/$p.patch" && echo "applied on the device's tree: $p.patch" \
      | tee -a "$L/summary.txt"; done
  R="--device cuda --examples 12 --no-failures --seed 114"
  step matrix_s114 140 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
      --check mla.graph_replay &
  step matrix_2_s114 140 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths &
  MUT="--mutant mla_producer_staged_store_drops_heads --mutant mla_producer_out_uv_unnormalized
       --mutant mla_producer_empty_lse_zero --mutant mla_producer_no_rescale"
  case "$LAND" in *step59*) MUT="$MUT --mutant mla_producer_staged_partials_drop_heads
       --mutant mla_combine_bf16_drops_last_split --mutant mla_split_empty_lse_zero";; esac
  NM=$(echo $MUT | grep -o -- "--mutant" | wc -l)
  step zool 140 python3 -m gate.cli zoo --device cuda $MUT &
  step testsl 140 python3 -m pytest -q -p no:cacheprovider -m gpu $TESTS &
  wait
  [ "$SECONDS" -lt 570 ] && step bench_mla 30 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
  M=$(matrix_passed); TW=$(tests_passed "$L/testsl.log"); Z=$(caught_in "$L/zool.log")
  echo "landed tree ($LAND): matrix passed $M; mutants caught $Z of $NM; tests $TW; commit: $([ $M = 1 ] && [ "$Z" = "$NM" ] && [ $TW = 1 ] && echo 1 || echo 0)" \
      | tee -a "$L/summary.txt"
fi
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && grep -E "REGRESSION|FAIL" "$f" | head -3 | cut -c1-220; done
echo "tests: $(tail -1 "$L/tests.log" | cut -c1-200)"
cat "$L"/zoo*.log | grep -E "^│ [a-z]" | cut -c1-90
[ -f "$L/probe.log" ] && grep -E "us \[|device|oracle" "$L/probe.log" | cut -c1-200
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -10 | cut -c1-200
true
