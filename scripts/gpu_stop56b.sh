#!/usr/bin/env bash
# Issue 14 steps 54 and 55's landing (~300 s), by the rules in docs/optimization_log.md ("Step 54": its B = 1 clause
# as restated after stop 56; "Step 55"), both evaluated on stop 56's output:
#  control  scripts/mla_q_probe.py at B = 1 (128K, 32K) and 32: ours, a second copy of ours (ours2) and step 54's
#           candidate, before the patches: the spread between identical launches at B = 1, reported whatever it shows
#  land     scripts/patches/step54.patch and step55.patch applied on the device's tree; on that tree: ours' matrix at
#           seed 105 (mla.absorbed, batch, absorbed_paged, graph_replay; mla.paths, causal, model.paths), the four
#           mutants through ours, the MLA GPU tests, then `glmgate bench --mechanism mla`. Committed locally only if
#           the matrix passes, the four mutants are caught and the tests pass
#   OUT=/tmp/out bash scripts/gpu_stop56b.sh
set -u
NAME=${NAME:-stop56b}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
step control 100 python3 scripts/mla_q_probe.py --forms ours2,qstrides --shapes 1x131072,1x32768,32x32768 \
    --json "$L/control.json"
for p in step54 step55; do
  git apply "scripts/patches/$p.patch" && echo "applied on the device's tree: $p.patch" | tee -a "$L/summary.txt"
done
R="--device cuda --examples 20 --no-failures --seed 105"
step matrix_s105 240 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
    --check mla.graph_replay &
step matrix_2_s105 240 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths &
step zool 200 python3 -m gate.cli zoo --device cuda --mutant mla_q_strides_rows_as_contiguous \
    --mutant mla_q_strides_heads_step_r --mutant mla_producer_q_heads_step_r --mutant mla_producer_out_uv_unnormalized &
step testsl 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_q_strides.py tests/test_mla_out_uv.py \
    tests/test_mla_producer.py tests/test_mla_heads64.py tests/test_mla_prefetch.py &
wait
step bench_mla 60 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
M=1; for f in "$L"/matrix*.log; do grep -qs " 0 failed, 0 errors, 0 not covered, 0 not run" "$f" || M=0; done
Z=$(grep -cE '^│ mla_[a-z_]+ +│ caught' "$L/zool.log")
TW=0; tail -1 "$L/testsl.log" | grep -qE "[0-9]+ passed" && ! tail -1 "$L/testsl.log" | grep -qE "failed|error" && TW=1
echo "landed tree: matrix passed $M; mutants caught $Z of 4; tests $TW; commit: $([ $M = 1 ] && [ "$Z" = 4 ] && [ $TW = 1 ] && echo 1 || echo 0)" \
    | tee -a "$L/summary.txt"
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/matrix*.log; do [ -f "$f" ] && grep -E "FAIL" "$f" | head -3 | cut -c1-220; done
echo "tests: $(tail -1 "$L/testsl.log" | cut -c1-200)"
grep -E "^│ [a-z]" "$L/zool.log" | cut -c1-90
grep -E "us \[" "$L/control.log" | cut -c1-150
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -10 | cut -c1-200
true
