#!/usr/bin/env bash
# Issue 14 step 2 on the H200: one decoder layer's decode step under ONE CUDA graph.
#  (a) gate.cost_measure: every layer kind's decode step (full geometry, NVFP4 experts, B=1 after 4096
#      tokens) eager and replayed from one captured graph ("graph ... ms": "-" would mean the capture
#      failed: its error is printed above the line) -> $OUT/cost.json, $OUT/cost.log
#  (b) the gate of the change: the graph-replay checks and the mechanisms the capture path touches
# (a) first, alone on the GPU (its times), then (b), each under its limit (T_COST, T).
#   OUT=/tmp/out bash scripts/gpu_issue14_graph.sh
set -u
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
T=${T:-190}
mkdir -p "$OUT"
timeout "${T_COST:-80}" python3 -m gate.cost_measure --json "$OUT/cost.json" > "$OUT/cost.log" 2>&1; echo "== cost_measure: exit $?" >> "$OUT/summary.txt"
( timeout "$T" python3 -m gate.cli run --device cuda --check kda.graph_replay --check mla.graph_replay \
    --check kda.decode --check mla.absorbed --check moe.forward --check dsa.index --examples ${EX:-20} --seed 0 \
    > "$OUT/gate.log" 2>&1
  echo "== gate: exit $?" >> "$OUT/summary.txt" )
cat "$OUT/summary.txt"
echo "=== cost_measure"; grep -v "Warn\|warn(" "$OUT/cost.log" | cut -c1-400 | tail -20
echo "=== gate"; grep -v "example \|Warn\|warn(" "$OUT/gate.log" | tail -20 | cut -c1-200
