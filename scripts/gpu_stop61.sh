#!/usr/bin/env bash
# Issue 14 step 59 on the GPU (~400 s): bf16 split partials, staged, merged on 2 warps (impl.candidates.mla_part_bf16_staged)
# gated against ours at seeds 115 and 116 (mla checks; mla.causal at 115), the MLA GPU
# tests, its mutant on cuda, the probe (ours / ours2 / partstaged), then scripts/stop61_verdict.py (the rule in
# docs/optimization_log.md "Step 59", written before this call) and, where it holds and time is left, its landing:
# step59.patch on the device's tree (after step 58 landed), ours' matrix at seed 117, mutants, GPU tests, the bench
#   OUT=/tmp/out bash scripts/gpu_stop61.sh
# needs step 58 landed first (step59.patch is made on that tree)
set -u
NAME=${NAME:-stop61}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
G="--device cuda --baseline triton --examples 20 --no-failures --candidate impl.candidates.mla_part_bf16_staged:Candidate"
CHECKS="--check mla.absorbed --check mla.batch --check mla.absorbed_paged --check mla.paths --check mla.graph_replay"
for s in 115 116; do step gate59_s$s 260 python3 -m gate.cli gate $G $CHECKS --seed $s & done
step gate59_2_s115 260 python3 -m gate.cli gate $G --check mla.causal --seed 115 &
step tests 200 python3 -m pytest -q -p no:cacheprovider -m gpu $MLA_GPU_TESTS &
step zoo59 200 python3 -m gate.cli zoo --device cuda --mutant mla_producer_staged_partials_drop_heads --mutant mla_combine_bf16_drops_last_split &
wait
step probe 120 python3 scripts/mla_q_probe.py --forms ours2,partstaged \
    --shapes 1x131072,1x32768,4x32768,8x32768,16x32768,32x32768,64x32768,128x32768 --json "$L/probe.json"
python3 scripts/stop61_verdict.py "$L" 2>&1 | tee -a "$L/summary.txt"
if grep -q "^lands: step59" "$L/summary.txt" && [ "$SECONDS" -lt 360 ]; then
  git apply scripts/patches/step59.patch && echo "applied on the device's tree: step59.patch" | tee -a "$L/summary.txt"
  R="--device cuda --examples 20 --no-failures --seed 117"
  step matrix_s117 220 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
      --check mla.graph_replay &
  step matrix_2_s117 220 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths &
  step zool 200 python3 -m gate.cli zoo --device cuda --mutant mla_producer_staged_partials_drop_heads \
      --mutant mla_combine_bf16_drops_last_split --mutant mla_producer_empty_lse_zero --mutant mla_split_empty_lse_zero &
  step testsl 150 python3 -m pytest -q -p no:cacheprovider -m gpu $MLA_GPU_TESTS &
  wait
  [ "$SECONDS" -lt 560 ] && step bench_mla 40 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
  M=$(matrix_passed); TW=$(tests_passed "$L/testsl.log"); Z=$(caught_in "$L/zool.log")
  echo "landed tree: matrix passed $M; mutants caught $Z of 4; tests $TW; commit: $([ $M = 1 ] && [ "$Z" = 4 ] && [ $TW = 1 ] && echo 1 || echo 0)" \
      | tee -a "$L/summary.txt"
fi
report tests
