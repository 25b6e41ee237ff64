#!/usr/bin/env bash
# Issue 14 step 18 on the H200 (docs/optimization_log.md): KDA chunked prefill with the intra-chunk pass on
# 16-row sub-chunk pairs (impl.candidates.kda_intra_blocked: kda_intra_kk_fwd_kernel + kda_intra_wu_fwd_kernel)
# gated and timed against ours (kda_intra_chunked_fwd_kernel) and fla-core 0.6.0's chunk_kda.
#  tests    tests/test_kda_intra_blocked.py (bf16 at K = V = 128 against the oracle as closely as ours) and
#           the KDA GPU tests
#  zoo      the planted inverse bug (kda_intra_blocked_x30_drops_a_term) on the GPU
#  gate     glmgate gate, the candidate against ours, at each of $SEEDS (kda.chunked, kda.causal, kda.paths,
#           kda.packed, kda.batch, kda.sublayer)
#  bench    gate.bench_kda prefill at H = 64 / 8, T = 16384 against fla with the sweep (the sub-chunk pair at
#           BK 16 / 32 and 1 / 2 / 4 warps, each checked against the oracle first) and both designs' kernel
#           split; needs the fla-core wheel in .whl/
#           (python3 -m pip download --no-deps --only-binary=:all: -d .whl fla-core==0.6.0)
#  ncu      Nsight Compute on one program wave of each intra kernel (ours and the pair): stall reasons,
#           issue utilization, achieved occupancy: the measurement the static counts cannot give
#   OUT=/tmp/out PARTS="tests zoo gate bench" SEEDS=0 bash scripts/gpu_issue14_step18.sh
set -u
NAME=step18
PARTS=${PARTS:-tests zoo gate bench}
source "$(dirname "$0")/gpu_steps.sh"
CAND=${CAND:-impl.candidates.kda_intra_blocked:Candidate}
has tests && step tests 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_intra_blocked.py \
    tests/test_kda_gpu.py
has zoo && step zoo 120 python3 -m gate.cli zoo --device cuda --mutant kda_intra_blocked_x30_drops_a_term
for seed in $SEEDS; do
  has gate && step "gate_s$seed" "${T_GATE:-300}" python3 -m gate.cli gate --device cuda --candidate "$CAND" \
      --baseline triton --check kda.chunked --check kda.causal --check kda.paths --check kda.packed \
      --check kda.batch --check kda.sublayer --examples "${EX:-20}" --seed "$seed" --json "$L/gate_s$seed.json"
done
has bench && step bench "${T_BENCH:-240}" python3 -m gate.bench_kda --skip-decode --sweep \
    --shapes "${SHAPES:-64:16384,8:16384}" --json "$L/bench.json"
if has ncu; then
  cat > "$L/ncu_one.py" <<'PY'
import torch
from impl import kda as ik
from impl.candidates import kda_intra_blocked as cand
H, T, K = 64, 16384, 128
g = torch.Generator(device="cuda").manual_seed(0)
q = torch.nn.functional.normalize(torch.randn(1, T, H, K, device="cuda", generator=g), dim=-1).bfloat16()
k = torch.nn.functional.normalize(torch.randn(1, T, H, K, device="cuda", generator=g), dim=-1).bfloat16()
v = torch.randn(1, T, H, K, device="cuda", generator=g).bfloat16()
gg = -torch.rand(1, T, H, K, device="cuda", generator=g) * 0.5
beta = torch.rand(1, T, H, device="cuda", generator=g).bfloat16()
for _ in range(2):
    ik.chunked(q, k, v, gg, beta, None, 64, None, False)
    cand.chunked(q, k, v, gg, beta, None, 64, None, False)
torch.cuda.synchronize()
PY
  step ncu "${T_NCU:-240}" ncu --clock-control none --kernel-name regex:"kda_intra" --launch-skip 3 \
      --launch-count 3 --section SpeedOfLight --section Occupancy --section WarpStateStats \
      --section SchedulerStats python3 "$L/ncu_one.py"
fi
echo "=== summary"; cat "$L/summary.txt"
has tests && { echo "=== tests"; tail -3 "$L/tests.log"; }
has zoo && { echo "=== zoo"; grep -E "^│ [a-z]" "$L/zoo.log" | cut -c1-80; }
has gate && { echo "=== gate"; for f in "$L"/gate_s*.log; do tail -10 "$f" | cut -c1-200; done; }
has bench && { echo "=== bench"; sed -n '/^prefill/,$p' "$L/bench.log" | cut -c1-260; }
has ncu && { echo "=== ncu"; grep -E "kda_intra|Duration|Issue Slots Busy|Achieved Occupancy|Stall|Registers" \
    "$L/ncu.log" | cut -c1-160 | head -60; }
true
