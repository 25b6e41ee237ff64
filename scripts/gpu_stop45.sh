#!/usr/bin/env bash
# Stop 45's first GPU call: step 39's verdict (scripts/gpu_stop44h.sh: the split decode's GPU tests, its gate at
# seeds 49 / 50, then scripts/kda_decode_probe.py) and, beside the gates, ours' KDA GPU tests after commit 31bb879
# (the state pass's output launch made one function; it had not run on a GPU)
# bench_results/issue14_h100_2026-12-06_stop45/ holds the run (MLA=0, then the MLA probe alone and
# scripts/mla_bh64_probe.py). That run's form, at commit 9f6d1f1, also ran tests/test_mla_rs.py and timed the
# output's column slices (config "rs": 2-3x slower on the H100, reverted); both are gone from this form.
#   OUT=/tmp/out bash scripts/gpu_stop45.sh
set -u
export NAME=${NAME:-stop45}
source "$(dirname "$0")/gpu_steps.sh"
OMP_NUM_THREADS=2 step kda_tests "${T_TESTS:-300}" python3 -m pytest -q -p no:cacheprovider -m gpu \
    tests/test_kda_pieces.py tests/test_kda_x_w.py tests/test_kda_aqk_lower.py tests/test_kda_intra_split.py \
    tests/test_kda_off_ftz.py tests/test_kda_diag_nan_last.py tests/test_kda_gamma_diag.py &
PARTS="verify39" bash "$(dirname "$0")/gpu_stop44h.sh" > "$L/verify39.out" 2>&1
wait
PARTS="probe39" bash "$(dirname "$0")/gpu_stop44h.sh" > "$L/probe39.out" 2>&1
# the sparse MLA kernel with all 64 heads a program (the static compile spills 32-184 B)
CFG='{"bh64_bw16_s3": {"bh": 64, "bw": 16, "num_warps": 8, "num_stages": 3},
 "bh64_bw32": {"bh": 64, "bw": 32, "num_warps": 8, "num_stages": 2}}'
[ "${MLA:-1}" = 1 ] && step mla_cfg 120 python3 scripts/mla_prefetch_probe.py --batches 32,128 --configs "$CFG" --json "$L/mla_cfg.json"
# Nsight Compute, alone after the probe: the sparse MLA kernel at B = 32; ours' KDA decode and fla's at B = 64
if [ "${NCU:-0}" = 1 ]; then
  N="ncu --clock-control none --launch-skip 1 --launch-count 1 --section SpeedOfLight --section Occupancy
     --section LaunchStats --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats
     --section ComputeWorkloadAnalysis"
  step ncu_mla 90 $N --kernel-name regex:mla_sparse_absorbed python3 scripts/ncu_stop45.py mla
  if [ "${NCU_DECODE:-0}" = 1 ]; then
    step ncu_decode_ours 90 $N --kernel-name regex:kda_decode_fused python3 scripts/ncu_stop45.py decode
    step ncu_decode_fla 90 $N --kernel-name regex:fused_recurrent python3 scripts/ncu_stop45.py decode
  fi
fi
tar czf "$OUT/$NAME.tgz" -C "$OUT" "$NAME"
echo "=== kda_tests"; tail -3 "$L/kda_tests.log" | cut -c1-200
cat "$L/verify39.out" "$L/probe39.out"
echo "=== mla_cfg"; grep -E "B=|copy ceiling" "$L/mla_cfg.log" | cut -c1-170
