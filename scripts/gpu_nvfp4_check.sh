#!/usr/bin/env bash
# Issue 12 on the GPU (bf16, Triton 3.6): per-half gate/up NVFP4 global scales ([E, 2]) and 128x4-swizzled
# block scales through the fused MoE kernels. Runs, each under its own time limit, logs and JSON under $OUT:
#   compile  the sm_90 compile check of the MoE kernels (SWIZZLED variants included)
#   tests    the NVFP4 / MoE test files on CUDA where they have GPU tests, and the matrix's GPU tests
#   run      glmgate run --device cuda over nvfp4,moe for several Hypothesis seeds, many examples each
#   mutants  the two new mutants through glmgate zoo on CUDA (each must be caught)
#   gate     the outside candidate (per-half pass, gate's scale for both FAIL) through glmgate gate on CUDA
#   bench    gate.bench_moe (every path gated against the oracle first; nvfp4_swizzled timed next to nvfp4)
# Usage there: bash scripts/gpu_nvfp4_check.sh [step ...]   (default: all, in that order)
set -u
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
steps=${*:-compile tests run mutants gate bench}
for s in $steps; do
  t0=$(date +%s)
  case $s in
    compile) timeout ${T_COMPILE:-120} python3 -m gate.cli kernels --kernel moe_gate_up_fwd_kernel \
               --kernel moe_down_fwd_kernel > "$OUT/compile.log" 2>&1 ;;
    tests)   GLMGATE_GPU_EXAMPLES=${EX:-20} timeout ${T_TESTS:-240} python3 -m pytest -m gpu -q -p no:cacheprovider -rfE \
               -k "nvfp4 or moe" tests/test_matrix.py > "$OUT/gpu_tests.log" 2>&1 ;;
    run)     rc=0
             for seed in ${SEEDS:-0 1 2 3}; do
               timeout ${T_RUN:-150} python3 -m gate.cli run --device cuda --mechanism nvfp4,moe --examples ${RUN_EX:-60} \
                 --seed $seed --no-failures --json "$OUT/run_seed$seed.json" > "$OUT/run_seed$seed.log" 2>&1 || rc=$?
             done
             (exit $rc) ;;
    mutants) timeout ${T_ZOO:-200} python3 -m gate.cli zoo --device cuda \
               --mutant nvfp4_fused_gate_scale_both_halves --mutant nvfp4_expert_swizzled_scales_read_linear \
               > "$OUT/zoo.log" 2>&1 ;;
    gate)    rc=0
             for c in Candidate BugGateScaleBoth; do
               (cd tests/outside && timeout ${T_GATE:-120} python3 -m gate.cli gate --candidate moe_nvfp4_mine:$c \
                  --device cuda --check nvfp4.gate --examples ${GATE_EX:-30} --no-failures --json "$OUT/gate_$c.json") \
                 > "$OUT/gate_$c.log" 2>&1
               echo "   gate $c exit $? (expected: Candidate 0, BugGateScaleBoth 1)"
             done ;;
    bench)   timeout ${T_BENCH:-150} python3 -m gate.bench_moe --json "$OUT/moe.json" > "$OUT/moe.log" 2>&1 ;;
  esac
  echo "== $s: exit $? in $(( $(date +%s) - t0 )) s"
done
for f in "$OUT"/*.log; do echo "=== $f"; grep -v "Warning\|warn(" "$f" | tail -n 25; done
