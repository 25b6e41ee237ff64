#!/usr/bin/env bash
# Issue 14 step 8 on the H200 (docs/optimization_log.md): the MoE host glue in two launches (the decode
# alignment in one program, the slot sum in one kernel), against impl.candidates.moe_align_torch (the torch
# glue it replaces; every output bitwise ours otherwise).
#  tests   the GPU tests of the two kernels (bit for bit against the torch forms, bf16 rounding in-kernel)
#  gate    glmgate gate: the peer against ours on the MoE checks and model.paths, per seed
#  bench   gate/bench_moe.py: bf16 and nvfp4_split beside their torch-glue peers, 5 runs round-robin
#  replay  the three layer kinds' decode steps from one CUDA graph, ours against the peer, 5 runs
#  zoo     the alignment mutant on the GPU;  matrix  the moe mechanism at another seed
#   OUT=/tmp/out PARTS="tests gate bench replay zoo matrix" SEEDS="0 1" bash scripts/gpu_issue14_step8.sh
# Each step's log lands in $OUT/step8/ and the folder is re-archived to $OUT/step8.tgz after every step,
# so a call cut at its limit still returns what ran.
set -u
NAME=step8
PARTS=${PARTS:-tests gate bench replay zoo matrix}
source "$(dirname "$0")/gpu_steps.sh"
gate() { step "gate_s$1" "$2" python3 -m gate.cli gate --device cuda --candidate impl.candidates.moe_align_torch:Candidate \
    --baseline triton --check moe.forward --check moe.rerun --check moe.batch --check nvfp4.gate --check model.paths \
    --examples "${EX:-12}" --seed "$1" --json "$L/gate_s$1.json"; }
has tests && step tests 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_moe_align.py
has gate && gate "${SEEDS%% *}" "${T_GATE:-170}"
has bench && step bench_moe "${T_BENCH:-100}" python3 -m gate.bench_moe --paths bf16,bf16_glue_torch,nvfp4_split,nvfp4_split_glue_torch \
    --tokens 1,8,32,128 --repeats 5 --skip-torch --no-w4a4 --json "$L/bench_moe.json"
has replay && step replay "${T_REPLAY:-110}" python3 scripts/profile_replay.py --kinds kda+dense,kda+sparse,dsa-full+sparse \
    --peer impl.candidates.moe_align_torch:Candidate --repeats 5 --json "$L/replay.json"
has gate && for seed in ${SEEDS#* }; do [ "$seed" = "${SEEDS%% *}" ] || gate "$seed" "${T_GATE2:-80}"; done
has zoo && step zoo "${T_ZOO:-50}" python3 -m gate.cli zoo --device cuda --mutant moe_align_block_tagged_left
has matrix && step matrix "${T_MATRIX:-120}" python3 -m gate.cli run --device cuda --mechanism moe --examples 20 --seed 2 \
    --json "$L/matrix.json"
echo "=== gate"; for f in "$L"/gate_s*.log; do grep "checks:\|rror" "$f" | cut -c1-160; done
echo "=== bench"; grep "median\| vs " "$L/bench_moe.log" | cut -c1-160
echo "=== replay"; grep "^===\|compare" "$L/replay.log" | cut -c1-200
echo "=== zoo / matrix"; grep "caught\|escaped\|checks:" "$L/zoo.log" "$L/matrix.log" | cut -c1-200
