#!/usr/bin/env bash
# Issue 14 step 9 on the H200 (docs/optimization_log.md): impl.candidates.dsa_pool_fused, the DSA indexer's
# pooled keys in one kernel, against ours (impl.dsa.pool_keys in torch launches).
#  tests   tests/test_dsa_pool_fused.py on the GPU (the compiled kernel against the float64 oracle)
#  gate    glmgate gate: the candidate against ours on the DSA / MLA checks and model.paths, per seed
#  replay  the dsa-full+sparse decode step from one CUDA graph, ours against the candidate, 5 runs
#  matrix  the dsa and mla mechanisms through the candidate at another seed
#   OUT=/tmp/out PARTS="tests gate replay matrix" SEEDS="0 1" bash scripts/gpu_issue14_step9.sh
# Each step's log lands in $OUT/step9/ and the folder is re-archived to $OUT/step9.tgz after every step,
# so a call cut at its limit still returns what ran.
set -u
NAME=step9
PARTS=${PARTS:-tests gate replay matrix}
source "$(dirname "$0")/gpu_steps.sh"
gate() { step "gate_s$1" "$2" python3 -m gate.cli gate --device cuda --candidate impl.candidates.dsa_pool_fused:Candidate \
    --baseline triton --check dsa.index --check dsa.rerun --check dsa.batch --check mla.paths --check model.paths \
    --examples "${EX:-12}" --seed "$1" --json "$L/gate_s$1.json"; }
has tests && step tests 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_dsa_pool_fused.py
has gate && gate "${SEEDS%% *}" "${T_GATE:-170}"
has replay && step replay "${T_REPLAY:-90}" python3 scripts/profile_replay.py --kinds dsa-full+sparse \
    --peer impl.candidates.dsa_pool_fused:Candidate --repeats 5 --json "$L/replay.json"
has gate && for seed in ${SEEDS#* }; do [ "$seed" = "${SEEDS%% *}" ] || gate "$seed" "${T_GATE2:-80}"; done
has matrix && step matrix "${T_MATRIX:-150}" python3 -m gate.cli run --device cuda --impl impl.candidates.dsa_pool_fused:Candidate \
    --mechanism dsa,mla --examples 20 --seed 2 --json "$L/matrix.json"
echo "=== gate"; for f in "$L"/gate_s*.log; do grep "checks:\|rror" "$f" | cut -c1-160; done
echo "=== replay"; grep "^===\|compare" "$L/replay.log" | cut -c1-200
echo "=== tests / matrix"; tail -1 "$L/tests.log"; grep "checks:" "$L/matrix.log" | cut -c1-200
