#!/usr/bin/env bash
# What we run on the GPU machine (the `device` tool): GPU tests, then every benchmark, each under its own
# time limit, logs and JSON under $OUT. Usage there: bash scripts/device_suite.sh [step ...]
# steps: tests mla moe layer kda (default: mla moe tests layer)
set -u
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi -L
python3 -c "import torch, triton, hypothesis; print('torch', torch.__version__, 'triton', triton.__version__, 'hypothesis', hypothesis.__version__)"
steps=${*:-mla moe tests layer}
for s in $steps; do
  t0=$(date +%s)
  case $s in
    tests) GLMGATE_GPU_EXAMPLES=${GLMGATE_GPU_EXAMPLES:-20} timeout ${T_TESTS:-200} python3 -m pytest -m gpu -q \
             -p no:cacheprovider -rfE tests/test_matrix.py tests/test_kda_gpu.py > "$OUT/gpu_tests.log" 2>&1 ;;
    mla)   timeout ${T_MLA:-100} python3 -m gate.bench_mla --json "$OUT/mla.json" --sweep > "$OUT/mla.log" 2>&1 ;;
    moe)   timeout ${T_MOE:-120} python3 -m gate.bench_moe --json "$OUT/moe.json" > "$OUT/moe.log" 2>&1 ;;
    layer) timeout ${T_LAYER:-120} python3 -m gate.bench_layer --json "$OUT/layer.json" > "$OUT/layer.log" 2>&1 ;;
    kda)   timeout ${T_KDA:-150} python3 -m gate.bench_kda --json "$OUT/kda.json" > "$OUT/kda.log" 2>&1 ;;
  esac
  echo "== $s: exit $? in $(( $(date +%s) - t0 )) s"
done
for f in "$OUT"/*.log; do echo "=== $f"; grep -v "Warning\|warn(" "$f" | tail -n 25; done
