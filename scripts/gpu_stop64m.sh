#!/usr/bin/env bash
# Issue 14's NVFP4 decode row again with repeats (stop 64): stop64h's bench_moe (one timing a path) read ours'
# nvfp4_split at 1.97 / 2.14 / 2.18x our bf16 at N = 1 / 8 / 32 on an H100, against 1.61-1.75x on the H200 (step 13);
# here 5 round-robin repeats a path (median, min-max), the same process, N = 1, 8, 32 (~90 s)
#   OUT=/tmp/out bash scripts/gpu_stop64m.sh          (run it with a 200 s timeout)
set -u
NAME=${NAME:-stop64m}
source "$(dirname "$0")/gpu_steps.sh"
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
step bench_moe 170 python3 -m gate.bench_moe --tokens 1,8,32 --paths bf16,nvfp4,nvfp4_split --repeats 5 --skip-torch \
    --no-w4a4 --json "$L/bench_moe.json"
cat "$L/summary.txt"; grep -vE "^\s*$|Warn|warn\(" "$L/bench_moe.log" | cut -c1-200
