#!/usr/bin/env bash
# Issue 14 step 12 on the H200 (docs/optimization_log.md): the DSA selection kernel counting each pass's digits
# in one packed reduction, over tiles of up to 2048 pools (ours, impl.dsa.select_pools), gated and timed
# against step 10's form (impl.candidates.dsa_select_digits: a [BS, BP, 2^RB] count, tiles of 1024 pools).
#  tests   the selection tests on the GPU (the kernel's rows against the oracle's pick, graph capture)
#  bench   scripts/dsa_select_variants.py: ours and step 10's form at each search step beside the torch form
#  replay  the dsa-full+sparse decode step from one CUDA graph, ours against step 10's form, 5 runs
#  gate    glmgate gate, ours against step 10's form, at seed 0
#   OUT=/tmp/out PARTS="tests bench replay gate" bash scripts/gpu_issue14_step12.sh
set -u
NAME=step12
PARTS=${PARTS:-tests bench replay gate}
source "$(dirname "$0")/gpu_steps.sh"
PEER=impl.candidates.dsa_select_digits:Candidate
has tests && step tests 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_dsa_select.py
has bench && step bench 150 python3 scripts/dsa_select_variants.py --json "$L/bench.json"
has replay && step replay "${T_REPLAY:-90}" python3 scripts/profile_replay.py --kinds dsa-full+sparse \
    --peer "$PEER" --repeats 5 --json "$L/replay.json"
has gate && step gate "${T_GATE:-260}" python3 -m gate.cli gate --device cuda --candidate triton --baseline "$PEER" \
    --check dsa.index --check dsa.rerun --check dsa.batch --check mla.paths --examples 10 --seed 0 \
    --json "$L/gate.json"
echo "=== summary"; cat "$L/summary.txt"
has tests && { echo "=== tests"; tail -3 "$L/tests.log"; }
has bench && { echo "=== bench"; grep "^B=" "$L/bench.log"; }
has replay && { echo "=== replay"; grep "^===\|compare" "$L/replay.log" | cut -c1-220; }
has gate && { echo "=== gate"; tail -15 "$L/gate.log" | cut -c1-200; }
