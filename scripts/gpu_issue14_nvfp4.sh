#!/usr/bin/env bash
# Issue 14 step 1 on the GPU (docs/optimization_log.md): the split NVFP4 weight tiles (impl.moe SPLIT) gated
# against our interleaved path, then timed next to it and to bf16. Run from the repository root:
#     OUT=$OUT bash scripts/gpu_issue14_nvfp4.sh [step ...]      (default: exact gate bench sass)
# Steps, each under its own time limit (T_<STEP> seconds), logs and JSON under $OUT:
#   exact  tests/test_nvfp4_split.py on CUDA: the fp16 scale product exact for every code and scale, and
#          the compiled kernels (interleaved and split, linear and swizzled) dequantizing every code under
#          every fp8 scale bit-exactly (the hardware's fp16 subnormals included)
#   gate   glmgate gate --device cuda --candidate impl.candidates.nvfp4_split:Candidate --baseline triton
#          on the MoE / NVFP4 checks, profile gpu, seeds 0 and 1 (the failure store under $OUT/failures)
#   bench  gate.bench_moe: bf16, NVFP4 interleaved and split in the same process at N = 1, 8, 32, 128, 4096,
#          REPEATS (5) round-robin repeats each (median, min, max), every path gated against the float64
#          oracle before it is timed
#   sass   static SASS of the hot loop per dequantized element, old and split (scripts/sass_loop.py;
#          the compiler's view with this machine's Triton; needs no GPU, so it runs last)
# The bench runs whatever the gate said (one GPU call for both): its numbers count only if the gate passed.
# Expected wall time ~200-250 s (most of it Triton compilation in the gate and the float64 oracle in the
# bench); at most 470 s with every step at its limit.
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export TRITON_DEFAULT_FP_FUSION=1              # Triton >= 3.9 warns without it; the default behaviour kept
CHECKS="--check moe.forward --check moe.batch --check moe.rerun --check nvfp4.gate --check nvfp4.batch"
nvidia-smi -L | tee "$OUT/device.log"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.log"
git log -1 --format='commit %H %s' 2>/dev/null | tee -a "$OUT/device.log"
steps=${*:-exact gate bench sass}
for s in $steps; do
  t0=$(date +%s)
  case $s in
    sass)  { timeout ${T_SASS:-40} python3 scripts/sass_loop.py --json "$OUT/sass_old.json" &&
             timeout ${T_SASS:-40} python3 scripts/sass_loop.py --set SPLIT=True --json "$OUT/sass_split.json"; } \
             > "$OUT/sass.log" 2>&1 ;;
    exact) timeout ${T_EXACT:-60} python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_nvfp4_split.py \
             > "$OUT/exact.log" 2>&1 ;;
    gate)  rc=0
           for seed in ${SEEDS:-0 1}; do
             timeout ${T_GATE:-90} python3 -m gate.cli gate --device cuda \
               --candidate impl.candidates.nvfp4_split:Candidate --baseline triton $CHECKS \
               --examples ${GATE_EX:-40} --seed $seed --failures "$OUT/failures" \
               --json "$OUT/gate_seed$seed.json" --markdown "$OUT/gate_seed$seed.md" > "$OUT/gate_seed$seed.log" 2>&1
             r=$?; echo "   gate seed $seed exit $r (0: pass)"; [ $r -ne 0 ] && rc=$r
           done
           (exit $rc) ;;
    bench) timeout ${T_BENCH:-150} python3 -m gate.bench_moe --paths bf16,nvfp4,nvfp4_split \
             --repeats ${REPEATS:-5} --skip-torch --no-w4a4 --json "$OUT/bench_moe_split.json" \
             > "$OUT/bench_moe_split.log" 2>&1 ;;
  esac
  echo "== $s: exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/steps.log"
done
for f in "$OUT"/*.log; do echo "=== $f"; grep -v "Warning\|warn(" "$f" | tail -n 30; done
