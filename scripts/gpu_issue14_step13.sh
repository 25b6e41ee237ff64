#!/usr/bin/env bash
# Issue 14 step 13 on the H200 (docs/optimization_log.md): the MoE decode glue and tile (ours: the router one
# token a program, the alignment's pad slots written first, BK 256 at <= 16 pairs) gated and timed against
# step 12's forms (impl.candidates.moe_decode_step12).
#  tests    the alignment (both pad-slot forms), PAIRS and split-tile tests on the GPU
#  zoo      the alignment mutants and the PAIRS mutant, planted on the GPU
#  gate     glmgate gate, ours against step 12's forms, at each of $SEEDS
#  variants scripts/moe_glue_variants.py: the router and the alignment alone, every variant bitwise equal
#  bench    gate.bench_moe: the grouped experts (alignment + GEMMs + slot sum), ours against step 12's, bf16 beside
#  replay   the kda+sparse and dsa-full+sparse decode steps from one CUDA graph, ours against step 12's, 5 runs
#  matrix   the moe and nvfp4 checks on cuda at each of $SEEDS, 20 examples
#   OUT=/tmp/out PARTS="tests zoo gate variants bench replay" bash scripts/gpu_issue14_step13.sh
#   OUT=/tmp/out PARTS="variants replay gate matrix" SEEDS=2 bash scripts/gpu_issue14_step13.sh   # call 2
set -u
NAME=step13
PARTS=${PARTS:-tests zoo gate variants bench replay}
source "$(dirname "$0")/gpu_steps.sh"
PEER=impl.candidates.moe_decode_step12:Candidate
has tests && step tests 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_moe_align.py \
    tests/test_nvfp4_pairs.py tests/test_nvfp4_split.py
has zoo && step zoo 150 python3 -m gate.cli zoo --device cuda --mutant moe_align_pads_point_at_last_pair \
    --mutant moe_align_block_tagged_left --mutant nvfp4_pairs_high_nibble_low_sign
for seed in $SEEDS; do
  has gate && step "gate_s$seed" "${T_GATE:-200}" python3 -m gate.cli gate --device cuda --candidate triton \
      --baseline "$PEER" --check moe.forward --check moe.route --check nvfp4.gate --check nvfp4.batch \
      --examples "${EX:-20}" --seed "$seed" --json "$L/gate_s$seed.json"
done
has variants && step variants 150 python3 scripts/moe_glue_variants.py --json "$L/variants.json"
has bench && step bench "${T_BENCH:-200}" python3 -m gate.bench_moe \
    --paths bf16,bf16_step12,nvfp4_split,nvfp4_split_step12 --repeats 5 --skip-torch --no-w4a4 \
    --tokens "${TOKENS:-1,8,32}" --json "$L/bench.json"
has replay && step replay "${T_REPLAY:-120}" python3 scripts/profile_replay.py --kinds kda+sparse,dsa-full+sparse \
    --peer "$PEER" --repeats 5 --json "$L/replay.json"
for seed in $SEEDS; do
  has matrix && step "matrix_s$seed" 200 python3 -m gate.cli run --device cuda --mechanism moe,nvfp4 \
      --examples 20 --seed "$seed" --json "$L/matrix_s$seed.json"
done
echo "=== summary"; cat "$L/summary.txt"
has tests && { echo "=== tests"; tail -3 "$L/tests.log"; }
has zoo && { echo "=== zoo"; grep -E "^│ [a-z]" "$L/zoo.log" | cut -c1-80; }
has gate && { echo "=== gate"; for f in "$L"/gate_s*.log; do tail -9 "$f" | cut -c1-200; done; }
has variants && { echo "=== variants"; grep -E "^kernel=" "$L/variants.log" | cut -c1-120; }
has bench && { echo "=== bench"; grep -E "median|vs" "$L/bench.log" | cut -c1-160; }
has replay && { echo "=== replay"; grep "^===\|compare\|moe_\|direct_copy" "$L/replay.log" | cut -c1-160; }
has matrix && { echo "=== matrix"; grep -h "checks:" "$L"/matrix_s*.log | cut -c1-200; }
true
