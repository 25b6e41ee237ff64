#!/usr/bin/env bash
# Issue 14 step 58 gated and landed in one call under LIMIT seconds (~450 s; the session's device time after failed
# machine starts held no more): scripts/gpu_stop60.sh's rule and landing (the verdict scripts/stop60_verdict.py), its
# landed-tree matrix at 12 examples a check instead of 20, and step 59 (impl.candidates.mla_part_bf16_staged) timed in
# the same probe but not gated (a measurement only: its rule needs its gate).
#   LIMIT=450 OUT=/tmp/out bash scripts/gpu_stop62c.sh
set -u
NAME=${NAME:-stop62c}
LIMIT=${LIMIT:-450}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
G="--device cuda --baseline triton --examples 20 --no-failures --candidate impl.candidates.mla_stage_o:Candidate"
CHECKS="--check mla.absorbed --check mla.batch --check mla.absorbed_paged --check mla.paths --check mla.graph_replay"
for s in 112 113; do step gate58_s$s 230 python3 -m gate.cli gate $G $CHECKS --seed $s & done
step gate58_2_s112 230 python3 -m gate.cli gate $G --check mla.causal --seed 112 &
TESTS="tests/test_mla_q_strides.py tests/test_mla_out_uv.py tests/test_mla_producer.py tests/test_mla_heads64.py
       tests/test_mla_prefetch.py tests/test_mla_merge.py tests/test_mla_stage_o.py"
step tests 200 python3 -m pytest -q -p no:cacheprovider -m gpu $TESTS &
step zoo58 200 python3 -m gate.cli zoo --device cuda --mutant mla_producer_staged_store_drops_heads &
wait
step probe 90 python3 scripts/mla_q_probe.py --forms ours2,stageo,partstaged \
    --shapes 1x131072,1x32768,8x32768,16x32768,32x32768,64x32768,128x32768,256x32768 --json "$L/probe.json"
python3 scripts/stop60_verdict.py "$L" 2>&1 | tee -a "$L/summary.txt"
if grep -q "^lands: step58" "$L/summary.txt" && [ "$SECONDS" -lt $((LIMIT - 160)) ]; then
  git apply scripts/patches/step58.patch && echo "applied on the device's tree: step58.patch" | tee -a "$L/summary.txt"
  R="--device cuda --examples 12 --no-failures --seed 114"
  T=$((LIMIT - SECONDS - 30))
  step matrix_s114 $T python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
      --check mla.graph_replay &
  step matrix_2_s114 $T python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths &
  step zool $T python3 -m gate.cli zoo --device cuda --mutant mla_producer_staged_store_drops_heads \
      --mutant mla_producer_out_uv_unnormalized --mutant mla_producer_empty_lse_zero --mutant mla_producer_no_rescale &
  step testsl $T python3 -m pytest -q -p no:cacheprovider -m gpu $TESTS &
  wait
  [ "$SECONDS" -lt $((LIMIT - 25)) ] && step bench_mla 25 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
  M=$(matrix_passed); TW=$(tests_passed "$L/testsl.log"); Z=$(caught_in "$L/zool.log")
  echo "landed tree: matrix passed $M; mutants caught $Z of 4; tests $TW; commit: $([ $M = 1 ] && [ "$Z" = 4 ] && [ $TW = 1 ] && echo 1 || echo 0)" \
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
