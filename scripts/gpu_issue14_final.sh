#!/usr/bin/env bash
# Issue 14 steps 4-6 on the H200, the landed code as a user runs it (no launch overrides):
#  (a) the GPU matrix of every mechanism the mHC change reaches (mhc, model, serving) at seed 2, and mhc
#      alone at seed 3 with 40 examples a check
#  (b) the gate of step 4 (the dense MLP's gate and up read in place) against the per-call concatenation
#  (c) every mHC mutant on the GPU
#   OUT=/tmp/out bash scripts/gpu_issue14_final.sh   (everything also in $OUT/final.tgz)
set -u
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
L=$OUT/logs
mkdir -p "$L"
step() { local name=$1 t=$2; shift 2; timeout "$t" "$@" > "$L/$name.log" 2>&1; echo "== $name: exit $?" >> "$L/summary.txt"; }
step matrix_s2 "${T_MATRIX:-220}" python3 -m gate.cli run --device cuda --mechanism mhc,model,serving --examples 20 \
    --seed 2 --json "$L/matrix_s2.json"
step mhc_s3 "${T_MHC:-50}" python3 -m gate.cli run --device cuda --mechanism mhc --examples 40 --seed 3 \
    --json "$L/mhc_s3.json"
step gate_step4 "${T_GATE:-110}" python3 -m gate.cli gate --device cuda --candidate triton \
    --baseline impl.candidates.gate_up_copy:Candidate --check moe.forward --check moe.batch --check model.paths \
    --examples 12 --seed 0 --json "$L/gate_step4.json"
MUT=$(python3 -m gate.cli zoo --list 2>/dev/null | awk '/^mhc_/{printf " --mutant %s", $1}')
step zoo_mhc "${T_ZOO:-120}" python3 -m gate.cli zoo --device cuda $MUT --examples 12
tar czf "$OUT/final.tgz" -C "$OUT" logs
cat "$L/summary.txt"
for f in matrix_s2 mhc_s3 gate_step4; do echo "=== $f"; grep "│\|checks\|rror" "$L/$f.log" | grep -v "example \|Warn\|warn(" \
    | cut -c1-180 | tail -30; done
echo "=== zoo"; grep "│\|caught\|missed" "$L/zoo_mhc.log" | grep -v "Warn" | cut -c1-160 | tail -12
