#!/usr/bin/env bash
# Stop 41 on the GPU, issue 14 step 31 landed (docs/optimization_log.md): the diagonal kernel stores q e^Γ,
# k e^(Γ_last - Γ), β k e^Γ before its dots, and the intra kernels take 32-bit offsets below 2^31 elements.
# Both keep every bit, so the verdict is bitwise first, then ours' checks at new seeds, then the bench.
#  verdict  side by side: the split pass's GPU tests (the diagonal kernel's qg / kg / kb bit for bit the W / U
#           kernel's, bf16) and chunked_ex's; ours' KDA checks on the tiny config with head dim 128 (bounded,
#           seed 7: nine checks) and the softplus gate (seed 8: five core checks)
#  probe    alone: scripts/kda_diag_probe.py on ours as landed (base, ftz, no_stores, bare)
#  bench    alone: scripts/kda_prefill_variants.py, ours_ex and off64_ex (64-bit offsets: ours before step 31's
#           offsets) beside fla's two paths, 5 alternating repeats, per-kernel breakdown
#   OUT=/tmp/out PARTS="verdict probe bench" bash scripts/gpu_stop41b.sh
set -u
NAME=${NAME:-stop41b}
PARTS=${PARTS:-verdict probe bench}
source "$(dirname "$0")/gpu_steps.sh"
if has verdict; then
  { tiny_config k128 && tiny_config sp128 softplus; } || exit 1
  export OMP_NUM_THREADS=3
  step tests "${T_TESTS:-300}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_intra_split.py \
      tests/test_kda_device_report.py &
  CORE="--check kda.chunked --check kda.causal --check kda.paths --check kda.packed --check kda.batch"
  LAYER="--check kda.sublayer --check kda.rerun --check kda.device_report --check model.paths"
  RUN="python3 -m gate.cli run --device cuda --examples ${EX:-20} --no-failures"
  step k128_core_s7 "${T_RUN:-300}" $RUN --config /tmp/k128 $CORE --seed 7 &
  step k128_layer_s7 "${T_RUN:-300}" $RUN --config /tmp/k128 $LAYER --seed 7 &
  step sp128_core_s8 "${T_RUN:-300}" $RUN --config /tmp/sp128 $CORE --seed 8 &
  wait
  export OMP_NUM_THREADS=4
fi
has probe && step probe "${T_PROBE:-200}" python3 scripts/kda_diag_probe.py --shapes "${SHAPES:-64:16384,8:16384}" \
    --variants base,ftz,off32,bare --json "$L/probe.json"
has bench && step bench "${T_BENCH:-300}" python3 scripts/kda_prefill_variants.py --shapes "${SHAPES:-64:16384,8:16384}" \
    --repeats "${REPEATS:-5}" --variants "${VARIANTS:-ours_ex,off64_ex}" --breakdown "${BREAKDOWN:-5}" \
    --json "$L/bench.json"
echo "=== summary"; cat "$L/summary.txt"
has verdict && { echo "=== tests"; tail -3 "$L/tests.log" | cut -c1-250;
  for f in "$L"/k128_*.log "$L"/sp128_*.log; do echo "-- $f"; grep -E "│ (kda|model)|checks:" "$f" | cut -c1-130; done; }
has probe && { echo "=== probe"; grep -E "^H=" "$L/probe.log" | cut -c1-200; }
has bench && { echo "=== bench"; grep -E "REFUSED|ms \[|^ *(kda|_|fla|ours|chunk)" "$L/bench.log" | cut -c1-170; }
true
