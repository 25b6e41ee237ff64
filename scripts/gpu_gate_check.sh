#!/usr/bin/env bash
# Coverage and composition over the candidate on the GPU (bf16): the whole matrix through the engine's
# recording proxies and the compositions' `ops`, then `glmgate gate` with a chunked-only candidate
# (tests/test_framework_cli_gate.py: Same must pass where its chunked runs and be NOT COVERED elsewhere,
# TailDropped must FAIL every kda path and the whole decoder). Usage there: bash scripts/gpu_gate_check.sh
set -u
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi -L
GLMGATE_GPU_EXAMPLES=${EX:-20} timeout ${T_MATRIX:-360} python3 -m pytest -m gpu -q -p no:cacheprovider -rfE \
  -n ${WORKERS:-4} tests/test_matrix.py > "$OUT/gpu_matrix.log" 2>&1
echo "== matrix exit $?"
cd tests
for c in Same TailDropped; do
  timeout ${T_GATE:-150} python3 -m gate.cli gate --candidate test_framework_cli_gate:$c --device cuda \
    --mechanism kda,model --examples ${GATE_EX:-10} --no-failures --json "$OUT/gate_$c.json" --junit "$OUT/gate_$c.xml" \
    > "$OUT/gate_$c.log" 2>&1
  echo "== gate $c exit $?"
done
for f in "$OUT"/*.log; do echo "=== $f"; grep -v "Warning\|warn(" "$f" | tail -n 30; done
