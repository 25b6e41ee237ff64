#!/usr/bin/env bash
# Stop 42 on the GPU, issue 14 step 32 (docs/optimization_log.md): the diagonal kernel's NaN report from Γ_last
# and β with no reduction (impl.candidates.kda_diag_nan_last, SplitTiles(diag_nan_last=True)), gated before it
# is timed, and register caps probed on top of it.
#  gate32   side by side: the candidate's GPU tests and the GPU-only FTZ mutant's (its CUDA pins must catch it);
#           glmgate gate of the candidate against ours: the tiny config with KDA head dim 128 (bounded gate) at
#           seeds 7 and 8 (core checks) and 7 (layer checks, kda.device_report among them), with the softplus
#           gate at seed 9 (core), the tiny config at seed 10 (core); SA SB SC SD: other seeds
#  probe    alone, after the verdicts: scripts/kda_diag_probe.py, the diagonal kernel's time with NAN_LAST and
#           under register caps of 200 / 168 (5 / 6 programs an SM)
#  bench    alone: scripts/kda_prefill_variants.py $VARIANTS beside fla's two paths, 5 alternating repeats
#  zoo32    (with gate32, beside it) the nan_report mutants and the FTZ mutant through `glmgate zoo --device cuda`
#  verify42 side by side, after the first call (the held sublayer reference now rounds the projections' outputs;
#           the planted helper renamed): the GPU-only mutants' tests (the FTZ mutant and the NVFP4 PAIRS one);
#           ours through the KDA layer checks on the tiny config with KDA head dim 128 at seed 8 (kda.paths
#           failed there on ours and the torch baseline alike), 11 and 12, 30 examples; the GPU zoo of the
#           mutants those checks catch, and the FTZ mutant
#   OUT=/tmp/out PARTS="gate32 probe" bash scripts/gpu_stop42.sh
set -u
NAME=${NAME:-stop42}
PARTS=${PARTS:-gate32 probe}
source "$(dirname "$0")/gpu_steps.sh"
if has gate32; then
  { tiny_config k128 && tiny_config sp128 softplus; } || exit 1
  export OMP_NUM_THREADS=2
  step tests32 "${T_TESTS:-240}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_diag_nan_last.py \
      tests/test_kda_device_report.py "tests/test_framework_mutants.py::test_a_gpu_only_mutant_is_caught_by_its_checks_cuda_pins[kda_intra_diag_ftz_without_log2e]" &
  has zoo32 && step zoo32 "${T_ZOO:-240}" python3 -m gate.cli zoo --device cuda ${ZOO:---mutant kda_chunked_ex_nan_beta_unreported --mutant kda_chunked_ex_nan_from_block_reference --mutant kda_intra_diag_ftz_without_log2e} &
  CAND="--device cuda --candidate ${CANDIDATE:-impl.candidates.kda_diag_nan_last:Candidate} --baseline ${BASELINE:-triton} --examples ${EX:-20}"
  CORE="--check kda.chunked --check kda.causal --check kda.paths --check kda.packed --check kda.batch"
  LAYER="--check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths"
  step gate32_k128_core_s${SA:-7} "${T_GATE:-300}" python3 -m gate.cli gate $CAND --config /tmp/k128 $CORE --seed ${SA:-7} &
  step gate32_k128_core_s${SB:-8} "${T_GATE:-300}" python3 -m gate.cli gate $CAND --config /tmp/k128 $CORE --seed ${SB:-8} &
  step gate32_k128_layer_s${SA:-7} "${T_GATE:-300}" python3 -m gate.cli gate $CAND --config /tmp/k128 $LAYER --seed ${SA:-7} &
  step gate32_sp128_core_s${SC:-9} "${T_GATE:-300}" python3 -m gate.cli gate $CAND --config /tmp/sp128 $CORE --seed ${SC:-9} &
  step gate32_tiny_core_s${SD:-10} "${T_GATE:-300}" python3 -m gate.cli gate $CAND $CORE --seed ${SD:-10} &
  wait
  export OMP_NUM_THREADS=4
fi
if has verify42; then
  tiny_config k128 || exit 1
  export OMP_NUM_THREADS=2
  step tests42 "${T_TESTS:-240}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_framework_mutants.py \
      -k "gpu_only_mutant_is_caught and (ftz or pairs)" &
  LAYER="--check kda.sublayer --check kda.paths --check kda.packed --check kda.checkpoint"
  for s in 8 11 12; do
    step ours_k128_layer_s$s "${T_GATE:-300}" python3 -m gate.cli run --device cuda --config /tmp/k128 $LAYER \
        --seed $s --examples "${EX:-30}" --no-failures &
  done
  step zoo42 "${T_ZOO:-300}" python3 -m gate.cli zoo --device cuda $(python3 -c "
from impl.mutants import catalogue as c
print(' '.join('--mutant ' + n for n, m in c.MUTANTS.items() if m.check in ('kda.sublayer', 'kda.paths', 'kda.packed',
      'kda.checkpoint') or n == 'kda_intra_diag_ftz_without_log2e'))") &
  wait
  export OMP_NUM_THREADS=4
fi
#  matrix42 side by side: every KDA check of ours on the GPU (the held reference's change, step 32 landed) on the tiny
#           config with KDA head dim 128 at seed 17, with the softplus gate at seed 18, on the tiny config at seed 19;
#           kda.scale (tens of GiB: T = 64K, B = 5 rows) alone after them. Stop 42 ran all three with kda.scale side
#           by side on one 80 GB card and three kda.scale runs took the memory: out-of-memory errors, no verdicts
if has matrix42; then
  { tiny_config k128 && tiny_config sp128 softplus; } || exit 1
  export OMP_NUM_THREADS=3
  KDA=$(python3 -c "
from invariants.matrix import CHECKS
print(' '.join('--check ' + c.name for c in CHECKS if c.mechanism == 'kda' and c.name != 'kda.scale'))")
  step kda_k128_s17 "${T_GATE:-400}" python3 -m gate.cli run --device cuda --config /tmp/k128 $KDA --seed 17 \
      --examples "${EX:-20}" --no-failures &
  step kda_sp128_s18 "${T_GATE:-400}" python3 -m gate.cli run --device cuda --config /tmp/sp128 $KDA --seed 18 \
      --examples "${EX:-20}" --no-failures &
  step kda_tiny_s19 "${T_GATE:-400}" python3 -m gate.cli run --device cuda $KDA --seed 19 \
      --examples "${EX:-20}" --no-failures &
  wait
  step kda_scale_s19 "${T_GATE:-400}" python3 -m gate.cli run --device cuda --check kda.scale --seed 19 --no-failures
  export OMP_NUM_THREADS=4
  for f in "$L"/kda_*.log; do echo "-- $f"; grep -E "│ kda\.|checks:|FAIL|Error" "$f" | cut -c1-130; done
fi
has probe && step probe "${T_PROBE:-200}" python3 scripts/kda_diag_probe.py --shapes "${SHAPES:-64:16384,8:16384}" \
    --variants "${PROBE:-base,nan_last,cap200,cap168,nl_cap200,nl_cap168,nl_stages1,base}" --json "$L/probe.json"
has bench && step bench "${T_BENCH:-300}" python3 scripts/kda_prefill_variants.py --shapes "${SHAPES:-64:16384,8:16384}" \
    --repeats "${REPEATS:-5}" --variants "${VARIANTS:-ours_ex,nanlast_ex}" --breakdown "${BREAKDOWN:-3}" \
    --json "$L/bench.json"
echo "=== summary"; cat "$L/summary.txt"
has gate32 && { echo "=== tests32"; tail -3 "$L/tests32.log" | cut -c1-250;
  for f in "$L"/gate32_*.log; do echo "-- $f"; grep -E "│ (kda|model)|checks:|FAIL|Error" "$f" | cut -c1-150; done; }
has probe && { echo "=== probe"; grep -E "^H=|Error" "$L/probe.log" | cut -c1-200; }
has bench && { echo "=== bench"; grep -E "REFUSED|ms \[|^ *(kda|_|fla|ours|chunk|nan)" "$L/bench.log" | cut -c1-170; }
has zoo32 && { echo "=== zoo32"; tail -15 "$L/zoo32.log" | cut -c1-200; }
has verify42 && { echo "=== tests42"; tail -3 "$L/tests42.log" | cut -c1-250;
  for f in "$L"/ours_k128_*.log; do echo "-- $f"; grep -E "^(│ )?(kda|model)\.[a-z_]+ .*(pass|FAIL)|checks:|FAIL|Error" "$f" | cut -c1-160 | head -12; done;
  echo "=== zoo42"; tail -25 "$L/zoo42.log" | cut -c1-200; }
true
