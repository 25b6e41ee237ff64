#!/usr/bin/env bash
# Issue 14 step 12 on the H200 (docs/optimization_log.md): the DSA selection kernel counting each pass's digits
# in one packed reduction, over tiles of up to 2048 pools (impl.candidates.dsa_select_packed), gated and timed
# against ours (impl.dsa.select_pools, step 10).
#  tests   the selection tests on the GPU (the kernel's rows against the oracle's pick, graph capture)
#  bench   scripts/dsa_select_variants.py: the kernel at each search step beside the torch form and the packed one
#  replay  the dsa-full+sparse decode step from one CUDA graph, ours against the packed candidate, 5 runs
#  gate    glmgate gate, the packed candidate against ours, at seed 0
#   OUT=/tmp/out PARTS="tests bench replay gate" bash scripts/gpu_issue14_step12.sh
set -u
NAME=step12
PARTS=${PARTS:-tests bench replay gate}
source "$(dirname "$0")/gpu_steps.sh"
CAND=impl.candidates.dsa_select_packed:Candidate
has tests && step tests 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_dsa_select.py
has bench && step bench 150 python3 scripts/dsa_select_variants.py --packed --json "$L/bench.json"
has replay && step replay "${T_REPLAY:-90}" python3 scripts/profile_replay.py --kinds dsa-full+sparse \
    --peer "$CAND" --repeats 5 --json "$L/replay.json"
has gate && step gate "${T_GATE:-260}" python3 -m gate.cli gate --device cuda --candidate "$CAND" --baseline triton \
    --check dsa.index --check dsa.rerun --check dsa.batch --check mla.paths --examples 10 --seed 0 \
    --json "$L/gate.json"
echo "=== summary"; cat "$L/summary.txt"
has tests && { echo "=== tests"; tail -3 "$L/tests.log"; }
has bench && { echo "=== bench"; grep "^B=" "$L/bench.log"; }
has replay && { echo "=== replay"; grep "^===\|compare" "$L/replay.log" | cut -c1-220; }
has gate && { echo "=== gate"; tail -15 "$L/gate.log" | cut -c1-200; }
