#!/usr/bin/env bash
# Issue 13 "full-geometry scale on the GPU", in one call: kda.scale with its CUDA pins (H=64, K=128 at
# T=16K and 64K) and, under the nightly profile, its B*T*H*K > 2^31 pin (B=5 rows of 64K tokens, compared
# per sample); dsa.index / mla.absorbed at the released indexer (topk 2048, kpool 4, 2051 slots) around the
# budget and in the thousands; moe.route at M=4096 through the released router; the GPU-only mutant
# kda_intra_offsets_int32 (flash-linear-attention #1080) through the zoo. Logs and JSON under $OUT.
# Usage there: bash scripts/gpu_scale.sh
set -u
export PYTHONPATH=${PYTHONPATH:-}:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
step() { local t0=$(date +%s); "$@"; local rc=$?; echo "== exit $rc in $(( $(date +%s) - t0 )) s: ${*:3:8}"; }
show() { grep -v "Warn\|warn(\|: example " "$1" | grep -E "^  [a-z]|checks:|worst|caught|ESCAPED|GPU only|Error|error" | head -30; }
step timeout ${T_SCALE:-240} python3 -m gate.cli run --device cuda --check kda.scale --profile nightly --examples 1 \
  --seed 0 --no-failures --json "$OUT/scale_kda.json" > "$OUT/scale_kda.log" 2>&1
show "$OUT/scale_kda.log"
step timeout ${T_FULL:-240} python3 -m gate.cli run --device cuda --check dsa.index --check mla.absorbed --check moe.route \
  --examples ${EX:-5} --seed 0 --no-failures --json "$OUT/scale_full.json" > "$OUT/scale_full.log" 2>&1
show "$OUT/scale_full.log"
step timeout ${T_ZOO:-150} python3 -m gate.cli zoo --device cuda --mutant kda_intra_offsets_int32 > "$OUT/scale_zoo.log" 2>&1
show "$OUT/scale_zoo.log"
