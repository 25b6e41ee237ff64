#!/usr/bin/env bash
# Issue 14 step 56 (~60 s): the producer kernel's per-program timeline (scripts/mla_timeline_probe.py) at B = 32
# (9 blocks and 1 block a program), 128 (33 and 1) and 16 (5); the probe also checks the stamped launch's output is
# ours' bit for bit
#   OUT=/tmp/out bash scripts/gpu_stop57.sh
set -u
NAME=${NAME:-stop57}
source "$(dirname "$0")/gpu_steps.sh"
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
step timeline 120 python3 scripts/mla_timeline_probe.py --json "$L/timeline.json"
echo "=== summary"; cat "$L/summary.txt"
cat "$L/timeline.log" | grep -vE "Warn|warn" | cut -c1-160
true
