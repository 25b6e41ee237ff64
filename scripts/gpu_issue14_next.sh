#!/usr/bin/env bash
# Issue 14, what stop 31 left for the next device session (NOTES.md "Stop 31"), in one call (~250 s warm):
#  copies   scripts/profile_replay.py --copy-sites on kda+sparse: the GPU profiler's account of the 9
#           direct_copy launches (scripts/gpu_mode_ops.py found them on the CPU: the norms' bf16 -> float32
#           conversions); check the CPU list against it before building the fused norms (log step 13 "Next")
#  dense    the kda+dense decode step after step 13 (its dense MLP takes BK 256 and the FILL alignment too;
#           the whole-model estimate still uses its step 8 time), ours against step 12's forms, 5 runs
#  kda      gate.bench_kda against fla-core 0.6.0 at the issue's shapes (the KDA kernels are unchanged since
#           the baseline; a re-measure in the same run as the rest). Needs the fla-core wheel in .whl/:
#           python3 -m pip download --no-deps --only-binary=:all: -d .whl fla-core==0.6.0
#   OUT=/tmp/out PARTS="copies dense kda" bash scripts/gpu_issue14_next.sh
# (stop 30's parts of this script, gate12 / matrix / sweep, ran in stop 31: bench_results/.../next/)
set -u
NAME=next
PARTS=${PARTS:-copies dense}
source "$(dirname "$0")/gpu_steps.sh"
has copies && step copies 120 python3 scripts/profile_replay.py --kinds kda+sparse --copy-sites --steps 5 \
    --json "$L/copies.json"
has dense && step dense 120 python3 scripts/profile_replay.py --kinds kda+dense \
    --peer impl.candidates.moe_decode_step12:Candidate --repeats 5 --json "$L/dense.json"
has kda && step kda 300 python3 -m gate.bench_kda --shapes 64:16384,8:16384 --batches 1,16,64,256 \
    --json "$L/kda.json"
echo "=== summary"; cat "$L/summary.txt"
has copies && { echo "=== copies"; sed -n '/copy ops by call site/,$p' "$L/copies.log" | cut -c1-200 | head -40; }
has dense && { echo "=== dense"; grep "^===\|compare" "$L/dense.log" | cut -c1-220; }
has kda && { echo "=== kda"; tail -25 "$L/kda.log" | cut -c1-200; }
true
