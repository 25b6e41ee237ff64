#!/usr/bin/env bash
# Stop 39 on the GPU, issue 14 step 28 (docs/optimization_log.md): chunked_ex, ours' KDA prefill without the host
# read of its NaN flags, against chunked and fla.
#  verdicts  side by side (verdicts, not timings):
#            - the GPU tests of the split pass (owed since stop 38's interpreter-cost and review refactors) and of
#              chunked_ex (a CUDA graph captures it: the GPU's own proof that it reads nothing back);
#            - kda.device_report, $EX_REPORT examples at each of $SEEDS;
#            - ours' KDA matrix at seed $MATRIX_SEED, $EX examples (owed on step 27's tiles): kda.chunked, causal,
#              paths, packed, batch in one process; sublayer, rerun, checkpoint, recurrent, decode, graph_replay
#              in another
#  bench     alone, after the verdicts: scripts/kda_prefill_variants.py (ours, ours_ex, fla, fla's bounded path;
#            5 alternating repeats) and glmgate bench's prefill rows (chunked and chunked_ex beside fla)
#  gate29    glmgate gate of step 29's candidate (impl.candidates.kda_diag64) against ours at each of $SEEDS, on
#            the tiny config with KDA head dim 128 (the change is invisible below 64), in four processes
#  landed29  ours with step 29 landed: GPU tests, scripts/kda_tile_bits.py, ours' KDA checks on head dim 128 with the
#            bounded and the softplus gate, then kda.scale
#  lean29    landed29 cut down: the split pass's GPU tests, the bits probe, the softplus gate at head dim 128
#   OUT=/tmp/out PARTS="verdicts bench" bash scripts/gpu_stop39.sh
#   OUT=/tmp/out NAME=stop39b PARTS="gate29 bench" VARIANTS=ours_ex,split_d64w2,split_d64_ex bash scripts/gpu_stop39.sh
#   OUT=/tmp/out NAME=stop39c PARTS="landed29 bench" VARIANTS=ours_ex,split_d32,split_d128w2 bash scripts/gpu_stop39.sh
set -u
NAME=${NAME:-stop39}
PARTS=${PARTS:-verdicts bench}
source "$(dirname "$0")/gpu_steps.sh"
if has verdicts; then
  step tests "${T_TESTS:-300}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_intra_split.py \
      tests/test_kda_device_report.py &
  for seed in $SEEDS; do
    step "report_s$seed" "${T_REPORT:-300}" python3 -m gate.cli run --device cuda --check kda.device_report \
        --examples "${EX_REPORT:-40}" --seed "$seed" --no-failures &
  done
  M="--device cuda --examples ${EX:-20} --seed ${MATRIX_SEED:-2} --no-failures"
  step matrix_core "${T_MATRIX:-420}" python3 -m gate.cli run $M --check kda.chunked --check kda.causal \
      --check kda.paths --check kda.packed --check kda.batch &
  step matrix_layer "${T_MATRIX:-420}" python3 -m gate.cli run $M --check kda.sublayer --check kda.rerun \
      --check kda.checkpoint --check kda.recurrent --check kda.decode --check kda.graph_replay &
  wait
fi
if has gate29; then
  # step 29's candidate (the diagonal kernel on K tiles of 64) changes nothing at head dims <= 32, the tiny
  # geometry's: the gate runs on the tiny config with linear_head_dim 128 (drawn head dims 16, 32 and 128)
  tiny_config k128 || exit 1
  CAND="--candidate impl.candidates.kda_diag64:Candidate --baseline triton --config /tmp/k128"
  for seed in $SEEDS; do
    step "gate29_core_s$seed" "${T_GATE:-400}" python3 -m gate.cli gate --device cuda $CAND --check kda.chunked \
        --check kda.causal --check kda.paths --check kda.packed --check kda.batch --examples "${EX:-20}" --seed "$seed" &
    step "gate29_layer_s$seed" "${T_GATE:-400}" python3 -m gate.cli gate --device cuda $CAND --check kda.sublayer \
        --check kda.rerun --check kda.device_report --check model.paths --examples "${EX:-20}" --seed "$seed" &
  done
  wait
fi
if has lean29; then
  # landed29 cut to what a short device budget holds: the split pass's GPU tests, the tile-bits probe, and the
  # softplus gate at head dim 128 (the one case step 29's gate did not judge) on kda.chunked and kda.causal
  tiny_config sp128 softplus || exit 1
  step tests29 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_intra_split.py tests/test_kda_device_report.py &
  step bits29 100 python3 scripts/kda_tile_bits.py &
  step m29_sp128 120 python3 -m gate.cli run --device cuda --examples "${EX:-12}" --no-failures --seed 3 --config /tmp/sp128 \
      --check kda.chunked --check kda.causal &
  wait
fi
if has landed29; then
  # ours with step 29 landed (the diagonal kernel on K tiles of 64): its GPU tests, the tile-bits probe, and ours'
  # KDA checks on the tiny config with head dim 128: bounded gate (seed 2) and softplus gate (seed 3, strong
  # decays through the diagonal kernel's exact pairs on K tiles of 64); then kda.scale alone (full-size pins)
  { tiny_config k128 && tiny_config sp128 softplus; } || exit 1
  step tests29 "${T_TESTS:-240}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_intra_split.py \
      tests/test_kda_device_report.py tests/test_kda_gpu.py &
  step bits29 120 python3 scripts/kda_tile_bits.py &
  R="--device cuda --examples ${EX:-20} --no-failures"
  step m29_k128_core 300 python3 -m gate.cli run $R --seed 2 --config /tmp/k128 --check kda.chunked --check kda.causal \
      --check kda.paths --check kda.packed --check kda.batch &
  step m29_k128_layer 300 python3 -m gate.cli run $R --seed 2 --config /tmp/k128 --check kda.sublayer --check kda.rerun \
      --check kda.checkpoint --check kda.device_report --check model.causal &
  step m29_sp128 300 python3 -m gate.cli run $R --seed 3 --config /tmp/sp128 --check kda.chunked --check kda.causal \
      --check kda.paths --check kda.packed --check kda.sublayer &
  wait
  step m29_scale 200 python3 -m gate.cli run --device cuda --check kda.scale --examples "${EX:-20}" --seed 0 --no-failures
fi
has bench && step bench "${T_BENCH:-300}" python3 scripts/kda_prefill_variants.py --shapes "${SHAPES:-64:16384,8:16384}" \
    --repeats "${REPEATS:-5}" --variants "${VARIANTS:-ours_ex}" --breakdown "${BREAKDOWN:-0}" --json "$L/bench.json"
has bench && step glmgate_bench "${T_BENCH:-300}" python3 -m gate.cli bench --mechanism kda -- --skip-decode \
    --shapes "${SHAPES:-64:16384,8:16384}" --json "$L/glmgate_bench.json"
echo "=== summary"; cat "$L/summary.txt"
has verdicts && { echo "=== tests"; tail -6 "$L/tests.log" | cut -c1-250;
  for f in "$L"/report_*.log "$L"/matrix_*.log; do echo "-- $f"; grep -E "checks:|│ kda|broke|FAIL" "$f" | cut -c1-200; done; }
has gate29 && { echo "=== gate29"; for f in "$L"/gate29_*.log; do echo "-- $f"; grep -vE "example [0-9]+/" "$f" | tail -12 | cut -c1-200; done; }
{ has landed29 || has lean29; } && { echo "=== landed29"; tail -4 "$L/tests29.log" | cut -c1-250; cat "$L/bits29.log" | tail -6;
  for f in "$L"/m29_*.log; do echo "-- $f"; grep -E "checks:|│ (kda|model)|broke" "$f" | cut -c1-200; done; }
has bench && { echo "=== bench"; grep -E "REFUSED|ms \[" "$L/bench.log" | cut -c1-170;
  grep -E "REFUSED|chunked_ex|safe-gate|^ *[0-9]+ +[0-9]+ " "$L/glmgate_bench.log" | cut -c1-170; }
true
