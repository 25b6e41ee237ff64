#!/usr/bin/env bash
# Issue 14 step 20 on the H200 (docs/optimization_log.md): the NVFP4 W4A16 split weight tiles (PAIRS) at the
# prefill tiles too (impl.candidates.nvfp4_prefill_split), gated on the new 160-token CUDA pins of
# nvfp4.gate and moe.forward (40 pairs an expert: the first checks to reach the 128-row prefill tiles on
# a GPU) and timed against ours (interleaved prefill tiles) and our bf16.
#  gate     glmgate gate, the candidate against ours, at each of $SEEDS (nvfp4.gate, moe.forward)
#  matrix   ours alone on the same checks (the pins: ours' prefill tiles under a contract for the first time)
#  bench    gate.bench_moe at N = 1024 / 4096 tokens: bf16, nvfp4 (interleaved), nvfp4_split (every path
#           checked against the oracle before it is timed), 5 repeats
#   OUT=/tmp/out PARTS="gate matrix bench" SEEDS=0 bash scripts/gpu_issue14_step20.sh
set -u
NAME=step20
PARTS=${PARTS:-gate matrix bench}
source "$(dirname "$0")/gpu_steps.sh"
CAND=impl.candidates.nvfp4_prefill_split:Candidate
has matrix && step matrix 240 python3 -m gate.cli run --device cuda --check nvfp4.gate --check moe.forward \
    --examples "${EX:-20}" --json "$L/matrix.json"
for seed in $SEEDS; do
  has gate && step "gate_s$seed" "${T_GATE:-240}" python3 -m gate.cli gate --device cuda --candidate "$CAND" \
      --baseline triton --check nvfp4.gate --check moe.forward --examples "${EX:-20}" --seed "$seed" \
      --json "$L/gate_s$seed.json"
done
has bench && step bench "${T_BENCH:-240}" python3 -m gate.bench_moe --paths bf16,nvfp4,nvfp4_split \
    --tokens "${TOKENS:-1024,4096}" --repeats 5 --skip-torch --no-w4a4 --json "$L/bench.json"
echo "=== summary"; cat "$L/summary.txt"
has matrix && { echo "=== matrix"; grep -E "checks:|nvfp4.gate|moe.forward" "$L/matrix.log" | cut -c1-200 | tail -6; }
has gate && { echo "=== gate"; for f in "$L"/gate_s*.log; do tail -8 "$f" | cut -c1-200; done; }
has bench && { echo "=== bench"; tail -30 "$L/bench.log" | cut -c1-220; }
true
