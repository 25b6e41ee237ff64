#!/usr/bin/env bash
# Issue 14 steps 4-5 on the H200, the measurements before a change is chosen:
#  (a) step 4: the three layer kinds' decode steps replayed from one CUDA graph (full geometry, NVFP4
#      experts, B = 1 after 4096 tokens), ours vs the dense MLP that concatenates gate and up on every call
#      (impl.candidates.gate_up_copy), 5 runs alternating, and the per-kernel profile of each
#  (b) step 5: the mHC launch variants at 1 / 32 / 4096 tokens, each coefficient call split into its
#      kernels (scripts/mhc_variants.py)
#  (c) the mutant of step 3 (mhc_last_chunk_dropped) on the GPU
#   OUT=/tmp/out bash scripts/gpu_issue14_step5.sh
set -u
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
timeout "${T_VAR:-200}" python3 scripts/mhc_variants.py --tokens 1,32,4096 --repeats 3 --json "$OUT/variants.json" \
    > "$OUT/variants.log" 2>&1; echo "== variants: exit $?" >> "$OUT/summary.txt"
timeout "${T_REPLAY:-220}" python3 scripts/profile_replay.py --peer impl.candidates.gate_up_copy:Candidate \
    --repeats 5 --json "$OUT/replay.json" > "$OUT/replay.log" 2>&1; echo "== replay: exit $?" >> "$OUT/summary.txt"
timeout "${T_ZOO:-90}" python3 -m gate.cli zoo --device cuda --mutant mhc_last_chunk_dropped --examples 10 \
    > "$OUT/zoo.log" 2>&1; echo "== zoo: exit $?" >> "$OUT/summary.txt"
cat "$OUT/summary.txt"
echo "=== variants"; grep -v "Warn\|warn(" "$OUT/variants.log" | cut -c1-260
echo "=== replay"; grep "^===\|compare\|mhc_\|Cat\|moe_" "$OUT/replay.log" | cut -c1-200
echo "=== zoo"; grep -v "Warn\|warn(" "$OUT/zoo.log" | tail -8 | cut -c1-200
