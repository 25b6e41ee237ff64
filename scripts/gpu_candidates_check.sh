#!/usr/bin/env bash
# The outside candidates (tests/outside/, written from docs/candidates.md alone) through `glmgate gate`
# on CUDA in bf16: the correct ones must pass, the buggy ones fail, as on the CPU
# (tests/test_framework_cli_outside.py). Usage there: bash scripts/gpu_candidates_check.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
EX=${EX:-10}
mkdir -p "$OUT"
cd tests/outside
gate() {  # candidate, checks...
  local cand=$1; shift
  local args=()
  for c in "$@"; do args+=(--check "$c"); done
  timeout ${T:-120} python3 -m gate.cli gate --candidate "$cand" --device cuda --examples "$EX" --no-failures \
    "${args[@]}" --json /tmp/cand.json > /tmp/cand.log 2>&1
  local rc=$?
  python3 - "$cand" "$rc" <<'PY'
import json, sys
try:
    d = json.load(open("/tmp/cand.json"))
    print(f"{sys.argv[1]:28s} exit {sys.argv[2]}: " + ", ".join(f"{r['check']} {r['status']}" for r in d["checks"]))
except Exception as e:
    print(f"{sys.argv[1]:28s} exit {sys.argv[2]}: no verdict ({e})")
PY
}
{
gate kda_mine:Candidate kda.recurrent kda.chunked kda.sublayer
gate kda_mine:BugTailDropped kda.chunked
gate kda_mine:NoBounds kda.chunked
gate mhc_mine:Candidate mhc.write_back
gate mhc_mine:BugComb mhc.write_back
gate nvfp4_mine:Candidate nvfp4.quantize nvfp4.dequantize nvfp4.gate
gate nvfp4_mine:BugHalfUp nvfp4.quantize
gate moe_mine:All moe.route moe.forward
gate moe_mine:BiasInWeights moe.route
gate mla_mine:Correct mla.absorbed mla.paths
gate mla_mine:WrongScale mla.absorbed
gate dsa_mine:Rows dsa.index mla.paths
} | tee "$OUT/candidates_cuda.log"
