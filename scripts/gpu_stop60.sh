#!/usr/bin/env bash
# Issue 14 step 58 on the GPU (~400 s): the staged bf16 epilogue (impl.candidates.mla_stage_o) gated against ours
# at seeds 112 and 113 (mla.absorbed, batch, absorbed_paged, paths, graph_replay; mla.causal at 112), the MLA GPU
# tests, its mutant on cuda, the probe (ours / ours2 / stageo), then scripts/stop60_verdict.py (the rule in
# docs/optimization_log.md "Step 58", written before this call) and, where it holds and time is left, its landing:
# step58.patch on the device's tree, ours' matrix at seed 114, four producer mutants, the GPU tests, the bench
#   OUT=/tmp/out bash scripts/gpu_stop60.sh
set -u
NAME=${NAME:-stop60}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
G="--device cuda --baseline triton --examples 20 --no-failures --candidate impl.candidates.mla_stage_o:Candidate"
CHECKS="--check mla.absorbed --check mla.batch --check mla.absorbed_paged --check mla.paths --check mla.graph_replay"
for s in 112 113; do step gate58_s$s 260 python3 -m gate.cli gate $G $CHECKS --seed $s & done
step gate58_2_s112 260 python3 -m gate.cli gate $G --check mla.causal --seed 112 &
step tests 200 python3 -m pytest -q -p no:cacheprovider -m gpu $MLA_GPU_TESTS &
step zoo58 200 python3 -m gate.cli zoo --device cuda --mutant mla_producer_staged_store_drops_heads &
wait
step probe 120 python3 scripts/mla_q_probe.py --forms ours2,stageo \
    --shapes 1x131072,1x32768,16x32768,32x32768,64x32768,128x32768,256x32768 --json "$L/probe.json"
python3 scripts/stop60_verdict.py "$L" 2>&1 | tee -a "$L/summary.txt"
if grep -q "^lands: step58" "$L/summary.txt" && [ "$SECONDS" -lt 360 ]; then
  git apply scripts/patches/step58.patch && echo "applied on the device's tree: step58.patch" | tee -a "$L/summary.txt"
  R="--device cuda --examples 20 --no-failures --seed 114"
  step matrix_s114 220 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
      --check mla.graph_replay &
  step matrix_2_s114 220 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths &
  step zool 200 python3 -m gate.cli zoo --device cuda --mutant mla_producer_staged_store_drops_heads \
      --mutant mla_producer_out_uv_unnormalized --mutant mla_producer_empty_lse_zero --mutant mla_producer_no_rescale &
  step testsl 150 python3 -m pytest -q -p no:cacheprovider -m gpu $MLA_GPU_TESTS &
  wait
  [ "$SECONDS" -lt 560 ] && step bench_mla 40 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
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
