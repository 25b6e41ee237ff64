#!/usr/bin/env bash
# RUN in stop 53 (H100). Kept as the record of its call.
# The follow-up call after gpu_stop53.sh (issue 14; reads nothing of its tree, lands nothing):
#  ncu_stall  the producer kernels (step 49's blocks of 32, step 51's of 64) at B = 128, 32K: the stall reasons a
#             warp between two issues, summed over the kernel (the metrics WarpStateStats charts)
#  ncu_src    the same launches' per-instruction stall samples (SourceCounters, the source page as CSV, SASS): which
#             of the producer's and the consumers' instructions the warps wait at
#  replay     the three layer kinds' decode step (B = 1, 4096 context) from one CUDA graph on this machine, 5 runs,
#             the bytes floor at the same run's copy speed (the H200 row of the issue's "within 3x" target)
#   OUT=/tmp/out bash scripts/gpu_stop53b.sh      (~250 s)
set -u
NAME=${NAME:-stop53b}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
N="ncu --clock-control none --kernel-name regex:mla_sparse_absorbed_ws --launch-skip 2 --launch-count 2"
command -v ncu > /dev/null || echo "no ncu on this machine" | tee -a "$L/summary.txt"
command -v ncu > /dev/null && step ncu_stall 60 $N --metrics \
    regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum \
    python3 scripts/mla_ncu_producer.py
command -v ncu > /dev/null && step ncu_src 90 $N --section SourceCounters --page source --print-source sass --csv \
    python3 scripts/mla_ncu_producer.py
step replay 150 python3 scripts/profile_replay.py --kinds kda+dense,kda+sparse,dsa-full+sparse --repeats 5 \
    --json "$L/replay.json"
echo "=== summary"; cat "$L/summary.txt"
[ -f "$L/ncu_stall.log" ] && grep -E "mla_sparse|stalled|issue_active|duration" "$L/ncu_stall.log" \
    | awk '$NF+0 > 0.05 || /mla_sparse|issue_active|duration/' | cut -c1-150 | head -70
[ -f "$L/ncu_src.log" ] && { wc -l "$L/ncu_src.log"; head -3 "$L/ncu_src.log" | cut -c1-400; }
[ -f "$L/replay.log" ] && grep -E "^copy|^===|bytes floor|compare" "$L/replay.log" | cut -c1-230
true
