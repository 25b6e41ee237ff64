#!/usr/bin/env bash
# Issue 14 step 3 on the H200: the mHC coefficients split along N·D.
#  (a) the gate of the change: ours (triton) against the one-program kernel it replaces
#      (impl.candidates.mhc_one_program) on the mHC checks and the decoder checks that run them, per seed
#  (b) glmgate bench --mechanism mhc: ours vs the one-program kernel, decode to prefill, 5 runs alternating
#  (c) one decoder layer's decode step replayed from one CUDA graph (full geometry, NVFP4 experts, B = 1
#      after 4096 tokens), ours vs the same layer with the one-program mHC, 5 runs alternating, and where
#      the replay's device time goes now (scripts/profile_replay.py)
#   OUT=/tmp/out SEEDS="0 1" EX=15 bash scripts/gpu_issue14_mhc.sh
set -u
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for seed in ${SEEDS:-0 1}; do
  timeout "${T:-200}" python3 -m gate.cli gate --device cuda --candidate triton \
      --baseline impl.candidates.mhc_one_program:Candidate --check mhc.coefficients --check mhc.write_back \
      --check mhc.batch --check mhc.rerun --check model.paths --check model.causal --examples "${EX:-15}" \
      --seed "$seed" --json "$OUT/gate_s$seed.json" > "$OUT/gate_s$seed.log" 2>&1
  echo "== gate seed $seed: exit $?" >> "$OUT/summary.txt"
done
timeout "${T_BENCH:-150}" python3 -m gate.cli bench --mechanism mhc -- --json "$OUT/bench_mhc.json" \
    > "$OUT/bench_mhc.log" 2>&1; echo "== bench mhc: exit $?" >> "$OUT/summary.txt"
timeout "${T_REPLAY:-200}" python3 scripts/profile_replay.py --peer impl.candidates.mhc_one_program:Candidate \
    --repeats 5 --json "$OUT/replay.json" > "$OUT/replay.log" 2>&1; echo "== replay: exit $?" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
for s in ${SEEDS:-0 1}; do echo "=== gate seed $s"; grep -v "example \|Warn\|warn(" "$OUT/gate_s$s.log" | grep "│\|checks:\|error\|Error" | cut -c1-200; done
echo "=== bench"; grep -v "Warn\|warn(" "$OUT/bench_mhc.log" | tail -8
echo "=== replay"; grep "^===\|compare\|mhc_coeff" "$OUT/replay.log" | cut -c1-220
