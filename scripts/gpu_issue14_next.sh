#!/usr/bin/env bash
# Issue 14, what stop 31 left for the next device session (NOTES.md "Stop 31"); norms first, in its own call
# (two gates and two replays: ~400-500 s), then PARTS="copies dense kda":
#  copies   scripts/profile_replay.py --copy-sites on kda+sparse: the GPU profiler's account of the 9
#           direct_copy launches (scripts/gpu_mode_ops.py found them on the CPU: the norms' bf16 -> float32
#           conversions); the GPU's check of the CPU list step 14 was built on (log step 13 "Next")
#  dense    the kda+dense decode step after step 13 (its dense MLP takes BK 256 and the FILL alignment too;
#           the whole-model estimate still uses its step 8 time), ours against step 12's forms, 5 runs
#  kda      gate.bench_kda against fla-core 0.6.0 at the issue's shapes (the KDA kernels are unchanged since
#           the baseline; a re-measure in the same run as the rest). Needs the fla-core wheel in .whl/:
#           python3 -m pip download --no-deps --only-binary=:all: -d .whl fla-core==0.6.0
#  norms    step 14's candidate (impl.candidates.norms_fused: the three norms as one launch each, through the
#           norm seams): glmgate gate on cuda against ours (the torch norms) at each of $SEEDS, 20 examples,
#           then the kda+sparse and dsa-full+sparse replays with it as the peer (speed ours/peer < 1 = it wins)
#   OUT=/tmp/out PARTS=norms bash scripts/gpu_issue14_next.sh; then PARTS="copies dense kda"
# (stop 30's parts of this script, gate12 / matrix / sweep, ran in stop 31: bench_results/.../next/)
set -u
NAME=next
PARTS=${PARTS:-norms copies dense}
source "$(dirname "$0")/gpu_steps.sh"
for seed in $SEEDS; do
  has norms && step "norms_gate_s$seed" 200 python3 -m gate.cli gate --device cuda \
      --candidate impl.candidates.norms_fused:Candidate --baseline triton --check kda.sublayer --check kda.paths \
      --check mla.paths --check model.paths --examples 20 --seed "$seed" --json "$L/norms_gate_s$seed.json"
done
has norms && step norms_replay 150 python3 scripts/profile_replay.py --kinds kda+sparse,dsa-full+sparse \
    --peer impl.candidates.norms_fused:Candidate --repeats 5 --json "$L/norms_replay.json"
has copies && step copies 120 python3 scripts/profile_replay.py --kinds kda+sparse --copy-sites --steps 5 \
    --json "$L/copies.json"
has dense && step dense 120 python3 scripts/profile_replay.py --kinds kda+dense \
    --peer impl.candidates.moe_decode_step12:Candidate --repeats 5 --json "$L/dense.json"
has kda && step kda 300 python3 -m gate.bench_kda --shapes 64:16384,8:16384 --batches 1,16,64,256 \
    --json "$L/kda.json"
echo "=== summary"; cat "$L/summary.txt"
has norms && { echo "=== norms"; for f in "$L"/norms_gate_s*.log; do tail -8 "$f" | cut -c1-200; done;
  grep "^===\|compare" "$L/norms_replay.log" | cut -c1-220; }
has copies && { echo "=== copies"; sed -n '/copy ops by call site/,$p' "$L/copies.log" | cut -c1-200 | head -40; }
has dense && { echo "=== dense"; grep "^===\|compare" "$L/dense.log" | cut -c1-220; }
has kda && { echo "=== kda"; tail -25 "$L/kda.log" | cut -c1-200; }
true
