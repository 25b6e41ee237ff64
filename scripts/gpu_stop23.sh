#!/usr/bin/env bash
# One device call for issue 14's NVFP4 split step and issue 15's predicted-vs-measured layers:
# correctness first, in parallel (the split kernel's exactness tests on CUDA, the gate at seeds 0 and 1,
# the static SASS counts), then the timings ALONE on the GPU, one after the other (the MoE bench with
# 5 repeats, then gate.cost_measure at TP 1 and the emulated TP 2 share). Every log in one archive.
#   OUT=/tmp/out bash scripts/gpu_stop23.sh
set -u
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/exact" "$OUT/gate0" "$OUT/gate1" "$OUT/sass" "$OUT/bench" "$OUT/cost"
t0=$(date +%s)
OUT=$OUT/exact bash scripts/gpu_issue14_nvfp4.sh exact > "$OUT/exact/run.txt" 2>&1 &
OUT=$OUT/gate0 SEEDS=0 bash scripts/gpu_issue14_nvfp4.sh gate > "$OUT/gate0/run.txt" 2>&1 &
OUT=$OUT/gate1 SEEDS=1 bash scripts/gpu_issue14_nvfp4.sh gate > "$OUT/gate1/run.txt" 2>&1 &
OUT=$OUT/sass bash scripts/gpu_issue14_nvfp4.sh sass > "$OUT/sass/run.txt" 2>&1 &
wait
echo "== correctness phase: $(( $(date +%s) - t0 )) s"
OUT=$OUT/bench bash scripts/gpu_issue14_nvfp4.sh bench > "$OUT/bench/run.txt" 2>&1
echo "== bench: $(( $(date +%s) - t0 )) s"
timeout ${T_COST:-200} python3 -m gate.cost_measure --tp-emulate 2 --json "$OUT/cost/cost_measure.json" > "$OUT/cost/cost_measure.log" 2>&1
echo "== cost_measure exit $? at $(( $(date +%s) - t0 )) s"
for d in exact gate0 gate1 sass; do echo "=== $d"; grep -E "==|exit|passed|failed|PASS|FAIL|regress" "$OUT/$d"/*.log "$OUT/$d/run.txt" 2>/dev/null | cut -c1-220 | tail -8; done
echo "=== bench"; grep -v "Warn\|warn(" "$OUT/bench/bench_moe_split.log" | tail -30 | cut -c1-220
echo "=== cost"; grep -v "Warn\|warn(" "$OUT/cost/cost_measure.log" | tail -14 | cut -c1-330
tar czf /tmp/stop23.tgz -C "$OUT" . && mkdir -p /tmp/keep && mv /tmp/stop23.tgz /tmp/keep/ && rm -rf "${OUT:?}"/* && mv /tmp/keep/stop23.tgz "$OUT/"
