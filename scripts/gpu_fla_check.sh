#!/usr/bin/env bash
# The flash-linear-attention adapter (adapters/fla_kda.py) on the GPU: where its time per example goes
# (scripts/fla_first_calls.py), then `glmgate gate` over it, with and without the warm-up.
# Needs fla-core 0.6.0 as a wheel in .whl/ (pip download --no-deps fla-core==0.6.0 -d .whl).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi -L
for step in ${STEPS:-first gate}; do
  case $step in
    first) timeout ${T_FIRST:-300} python3 scripts/fla_first_calls.py 2>&1 | grep -v Warn | tee "$OUT/fla_first_calls.log" ;;
    gate)
      for w in ${WARMUP_MODES:---no-warmup --warmup}; do
        /usr/bin/time -f "%e s wall" timeout ${T_GATE:-400} python3 -m gate.cli gate --candidate adapters.fla_kda:Candidate \
          --device cuda --mechanism kda --examples ${EX:-20} --seed ${SEED:-0} --no-failures $w \
          --json "$OUT/fla_gate$w.json" 2>&1 | grep -v "Warn\|warn(" | tee "$OUT/fla_gate$w.log"
      done ;;
  esac
done
