#!/usr/bin/env bash
# Issue 14 steps 54 and 55 on the GPU (~450 s): their gates, tests, mutants and probe; then, where their landing rules
# (docs/optimization_log.md "Step 54", "Step 55", written before this call) hold on this call's output and time is
# left, their landing on the device's tree and that tree's matrix, mutants and bench.
#  phase 1 (parallel)  impl.candidates.mla_q_strides (step 54) and impl.candidates.mla_out_uv (step 55) each gated
#           against ours at seeds 103 and 104 (mla.absorbed, batch, absorbed_paged, paths, graph_replay; mla.causal
#           at 103); the MLA GPU tests (their bits tests among them); their four mutants on cuda
#  phase 2  scripts/mla_q_probe.py (ours / qstrides / outuv / merge1 at B = 1-256, 5 alternating rounds)
#  verdict  scripts/stop56_verdict.py: each step's rule over the logs and probe.json
#  phase 3  (if a step lands and SECONDS < 330) step54.patch [+ step55.patch] applied; ours' matrix at seed 105
#           (mla checks; mla.paths, causal, model.paths), the four mutants through ours, `glmgate bench --mechanism mla`
#   OUT=/tmp/out bash scripts/gpu_stop56.sh
set -u
NAME=${NAME:-stop56}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
python3 -c "import triton; print('triton', triton.__version__)" | tee -a "$L/summary.txt"
CHECKS="--check mla.absorbed --check mla.batch --check mla.absorbed_paged --check mla.paths --check mla.graph_replay"
for c in 54:mla_q_strides 55:mla_out_uv; do
  n=${c%%:*}; m=${c#*:}
  G="--device cuda --baseline triton --examples 20 --no-failures --candidate impl.candidates.$m:Candidate"
  for s in 103 104; do
    step gate${n}_s$s 260 python3 -m gate.cli gate $G $CHECKS --seed $s &
  done
  step gate${n}_2_s103 260 python3 -m gate.cli gate $G --check mla.causal --seed 103 &
done
step tests 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_q_strides.py tests/test_mla_out_uv.py \
    tests/test_mla_producer.py tests/test_mla_heads64.py tests/test_mla_prefetch.py &
step zoo54 240 python3 -m gate.cli zoo --device cuda --mutant mla_q_strides_rows_as_contiguous \
    --mutant mla_q_strides_heads_step_r --mutant mla_producer_q_heads_step_r \
    --mutant mla_producer_out_uv_unnormalized &
wait
step probe 120 python3 scripts/mla_q_probe.py --json "$L/probe.json"
python3 scripts/stop56_verdict.py "$L" | tee -a "$L/summary.txt"
LAND=$(grep -E "^lands:" "$L/summary.txt" | tail -1 | cut -d: -f2 | tr -d ' ')
if [ -n "$LAND" ] && [ "$LAND" != "none" ] && [ "$SECONDS" -lt 330 ]; then
  for p in ${LAND//,/ }; do
    git apply "scripts/patches/$p.patch" && echo "applied on the device's tree: $p.patch" | tee -a "$L/summary.txt"
  done
  R="--device cuda --examples 20 --no-failures --seed 105"
  step matrix_s105 200 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
      --check mla.graph_replay &
  step matrix_2_s105 200 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths &
  step zool 200 python3 -m gate.cli zoo --device cuda --mutant mla_q_strides_rows_as_contiguous \
      --mutant mla_q_strides_heads_step_r --mutant mla_producer_q_heads_step_r \
      --mutant mla_producer_out_uv_unnormalized &
  step testsl 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_q_strides.py tests/test_mla_out_uv.py \
      tests/test_mla_producer.py &
  wait
  [ "$SECONDS" -lt 560 ] && step bench_mla 40 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
  M=1; for f in "$L"/matrix*.log; do grep -qs " 0 failed, 0 errors, 0 not covered, 0 not run" "$f" || M=0; done
  echo "landed tree: matrix passed $M; mutants caught $(grep -cE '^│ mla_[a-z_]+ +│ caught' "$L/zool.log") of 4;" \
       "tests: $(tail -1 "$L/testsl.log" | cut -c1-80)" | tee -a "$L/summary.txt"
fi
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && grep -E "REGRESSION|FAIL" "$f" | head -3 | cut -c1-220; done
echo "tests: $(tail -1 "$L/tests.log" | cut -c1-200)"
cat "$L"/zoo*.log | grep -E "^│ [a-z]" | cut -c1-90
[ -f "$L/probe.log" ] && grep -E "us \[|device" "$L/probe.log" | cut -c1-230
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -10 | cut -c1-200
true
