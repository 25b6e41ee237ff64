#!/usr/bin/env bash
# Stop 48's first GPU call: issue 14 step 14 (impl.candidates.norms_fused, the three norms as one launch each)
# gated and timed in the layers, and step 44's probe (the sparse MLA decode's split counts below 8 query rows):
#  gate14   side by side: glmgate gate of the norms candidate against ours on cuda, 20 examples a check, at
#           seeds 80 and 81: kda.sublayer + kda.paths, and mla.paths + model.paths, each pair its own process
#  replay   alone after: scripts/profile_replay.py, the three layer kinds' decode step (B = 1, 4096 context)
#           replayed from one CUDA graph, ours against the candidate, 5 alternating runs, the bytes floor at
#           this run's copy speed
#  probe    scripts/mla_split_probe.py (attend at other split counts, B = 1-16)
#   OUT=/tmp/out bash scripts/gpu_stop48.sh
set -u
NAME=${NAME:-stop48}
PARTS=${PARTS:-gate14 replay probe}
source "$(dirname "$0")/gpu_steps.sh"
if has gate14; then
  export OMP_NUM_THREADS=3
  G="--device cuda --candidate impl.candidates.norms_fused:Candidate --baseline triton --examples 20 --no-failures"
  for s in 80 81; do
    step gate14_kda_s$s 240 python3 -m gate.cli gate $G --check kda.sublayer --check kda.paths --seed $s &
    step gate14_model_s$s 240 python3 -m gate.cli gate $G --check mla.paths --check model.paths --seed $s &
  done
  wait
fi
has replay && [ "$SECONDS" -lt 330 ] && step replay 180 python3 scripts/profile_replay.py \
    --kinds kda+dense,kda+sparse,dsa-full+sparse --peer impl.candidates.norms_fused:Candidate --repeats 5 \
    --json "$L/replay.json"
has probe && [ "$SECONDS" -lt 480 ] && step probe 100 python3 scripts/mla_split_probe.py --json "$L/probe.json"
echo "=== summary"; cat "$L/summary.txt"
has gate14 && for f in "$L"/gate14_*.log; do echo "-- $f"; grep -E "│ (kda|mla|model)|checks:|FAIL|Error|REGRESSION" "$f" | cut -c1-200; done
has replay && { echo "=== replay"; grep -E "^copy|^===|bytes floor|compare" "$L/replay.log" | cut -c1-230; }
has probe && { echo "=== probe"; grep -vE "rel-L2" "$L/probe.log" | cut -c1-160; grep -E "rel-L2" "$L/probe.log" | cut -c1-160 | head -30; }
true
