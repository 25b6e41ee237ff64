#!/usr/bin/env bash
# Issue 14 step 11 on the H200 (docs/optimization_log.md): the split NVFP4 tiles dequantized two e2m1 codes
# per 32-bit instruction (PAIRS: inline PTX, impl/kernels/moe.py _E2M1X2_ASM); impl.candidates.nvfp4_fp16_split
# (step 1's fp16 product) is the peer it is gated and timed against.
#  tests   the PAIRS exactness tests (every code under every scale through the compiled kernel) and step 1's
#  sass    the hot loop's instructions per element with the H200's own Triton (scripts/sass_loop.py)
#  zoo     the PAIRS PTX mutant (GPU only) and a W4A16 scale mutant, planted on the GPU
#  gate    glmgate gate, ours against the fp16 form, at each of $SEEDS
#  bench   gate/bench_moe.py: bf16, the fp16 split form and ours (PAIRS), 5 repeats round-robin
#  replay  the kda+sparse and dsa-full+sparse decode steps from one CUDA graph, ours against the peer, 5 runs
#   OUT=/tmp/out PARTS="tests sass zoo gate bench replay" bash scripts/gpu_issue14_step11.sh
set -u
NAME=step11
PARTS=${PARTS:-tests sass zoo gate bench replay}
source "$(dirname "$0")/gpu_steps.sh"
PEER=impl.candidates.nvfp4_fp16_split:Candidate
has tests && step tests 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_nvfp4_pairs.py \
    tests/test_nvfp4_split.py
has sass && step sass 60 python3 scripts/sass_loop.py --set SPLIT=True --set PAIRS=True --json "$L/sass.json"
has sass && step sass_fp16 60 python3 scripts/sass_loop.py --set SPLIT=True --set PAIRS=False
has zoo && step zoo 150 python3 -m gate.cli zoo --device cuda --mutant nvfp4_pairs_high_nibble_low_sign \
    --mutant nvfp4_fused_gate_scale_both_halves
for seed in $SEEDS; do
  has gate && step "gate_s$seed" "${T_GATE:-200}" python3 -m gate.cli gate --device cuda --candidate triton \
      --baseline "$PEER" --check nvfp4.gate --check nvfp4.batch --check moe.forward --examples "${EX:-20}" \
      --seed "$seed" --json "$L/gate_s$seed.json"
done
has bench && step bench "${T_BENCH:-200}" python3 -m gate.bench_moe --paths bf16,nvfp4_split_fp16,nvfp4_split \
    --repeats 5 --skip-torch --no-w4a4 --tokens "${TOKENS:-1,8,32,128,4096}" --json "$L/bench.json"
has replay && step replay "${T_REPLAY:-120}" python3 scripts/profile_replay.py --kinds kda+sparse,dsa-full+sparse \
    --peer "$PEER" --repeats 5 --json "$L/replay.json"
echo "=== summary"; cat "$L/summary.txt"
has tests && { echo "=== tests"; tail -3 "$L/tests.log"; }
has sass && { echo "=== sass"; grep -E "^moe_" "$L/sass.log" "$L/sass_fp16.log" | cut -c1-150; }
has zoo && { echo "=== zoo"; grep -E "^│ [a-z]" "$L/zoo.log" | cut -c1-80; }
has gate && { echo "=== gate"; for f in "$L"/gate_s*.log; do tail -12 "$f" | cut -c1-200; done; }
has bench && { echo "=== bench"; grep -E "^ *[0-9]+ |median|vs" "$L/bench.log" | cut -c1-160; }
has replay && { echo "=== replay"; grep "^===\|compare" "$L/replay.log" | cut -c1-220; }
