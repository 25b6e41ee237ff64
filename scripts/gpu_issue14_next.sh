#!/usr/bin/env bash
# Issue 14, what stop 30 left for the next device session (NOTES.md "Stop 30"), one part per call:
#  gate12   step 12's missing regression verdict: glmgate gate, ours (packed selection counts) against step 10's
#           form, dsa.index / dsa.rerun / dsa.batch / mla.paths at seed 0 (~360 s: both sides run dsa.index's
#           full-size CUDA pins; both earlier calls were cut while the peer's side ran)
#  matrix   the dsa,mla matrix at seed 1 past dsa.index (mla.* and the rest were cut), 20 examples
#  sweep    gate.bench_moe --sweep at N = 1, 8, 32: every SWEEP_TILES decode tile with the PAIRS dequantization
#           (deeper pipelines, BK 256, BN 128: step 11's next), bf16 beside it
#   OUT=/tmp/out PARTS=gate12 bash scripts/gpu_issue14_next.sh      # then PARTS="matrix sweep"
set -u
NAME=next
PARTS=${PARTS:-gate12}
source "$(dirname "$0")/gpu_steps.sh"
has gate12 && step gate12 "${T_GATE:-560}" python3 -m gate.cli gate --device cuda --candidate triton \
    --baseline impl.candidates.dsa_select_digits:Candidate --check dsa.index --check dsa.rerun --check dsa.batch \
    --check mla.paths --examples 10 --seed 0 --json "$L/gate12.json"
for chk in dsa.batch dsa.rerun dsa.index_paged mla.absorbed mla.absorbed_paged mla.batch mla.causal mla.graph_replay mla.paths mla.rerun; do
  has matrix && step "matrix_$chk" 90 python3 -m gate.cli run --device cuda --check "$chk" --examples 20 --seed 1 \
      --json "$L/matrix_$chk.json"
done
has sweep && step sweep 400 python3 -m gate.bench_moe --sweep --tokens 1,8,32 --paths nvfp4_split,bf16 --skip-torch \
    --no-w4a4 --json "$L/sweep.json"
echo "=== summary"; cat "$L/summary.txt"
has gate12 && { echo "=== gate12"; tail -12 "$L/gate12.log" | cut -c1-200; }
has matrix && { echo "=== matrix"; grep -h "checks:" "$L"/matrix_*.log | cut -c1-200; }
has sweep && { echo "=== sweep"; grep -E "sweep best|^ *[0-9]+ " "$L/sweep.log" | cut -c1-200; }
