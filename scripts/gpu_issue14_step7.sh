#!/usr/bin/env bash
# Issue 14 step 7 on the H200 (docs/optimization_log.md): the decode gate_up split along D, a candidate.
#  (a) the gate: impl.candidates.moe_split_k against ours on the MoE checks (moe.forward's D = 1024 GPU pin
#      makes every K range live) and model.paths, per seed
#  (b) gate/bench_moe.py: the candidate's paths beside the ones they would replace, 5 runs round-robin
#  (c) the three layer kinds' decode replays with the candidate's experts (scripts/profile_replay.py)
#  (d) serving.state_machine on the GPU (not finished last stop: its first example compiles ~140 s)
#   OUT=/tmp/out SEEDS="0 1" bash scripts/gpu_issue14_step7.sh   (everything also in $OUT/step7.tgz)
set -u
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
L=$OUT/step7
mkdir -p "$L"
step() { local name=$1 t=$2; shift 2; timeout "$t" "$@" > "$L/$name.log" 2>&1; echo "== $name: exit $?" >> "$L/summary.txt"; }
for seed in ${SEEDS:-0 1}; do
  step "gate_s$seed" "${T_GATE:-150}" python3 -m gate.cli gate --device cuda --candidate impl.candidates.moe_split_k:Candidate \
      --baseline triton --check moe.forward --check moe.rerun --check nvfp4.gate --check model.paths \
      --examples "${EX:-12}" --seed "$seed" --json "$L/gate_s$seed.json"
done
step bench_moe "${T_BENCH:-200}" python3 -m gate.bench_moe --paths bf16,bf16_split_k,nvfp4_split,nvfp4_split_k \
    --tokens 1,8,32,128 --repeats 5 --skip-torch --no-w4a4 --json "$L/bench_moe.json"
step replay "${T_REPLAY:-150}" python3 scripts/profile_replay.py --kinds kda+sparse,dsa-full+sparse \
    --peer impl.candidates.moe_split_k:Candidate --repeats 5 --json "$L/replay.json"
[ -n "${SERVING:-}" ] && step serving "${T_SERVING:-300}" python3 -m gate.cli run --device cuda \
    --check serving.state_machine --examples 8 --seed 2 --json "$L/serving.json"
tar czf "$OUT/step7.tgz" -C "$OUT" step7
cat "$L/summary.txt"
for s in ${SEEDS:-0 1}; do echo "=== gate seed $s"; grep "│\|checks:\|rror" "$L/gate_s$s.log" | grep -v "example " \
    | cut -c1-180 | tail -12; done
echo "=== bench"; grep -v "Warn\|warn(" "$L/bench_moe.log" | tail -30 | cut -c1-200
echo "=== replay"; grep "^===\|compare\|moe_" "$L/replay.log" | cut -c1-200
