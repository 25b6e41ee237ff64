#!/usr/bin/env bash
# Second device call of stop 23: the gate of issue 14 step 1's landed default (triton, split tiles at
# decode) against the interleaved form, seeds 0 and 1; the split exactness tests on CUDA; and the
# suite across GPUs on one GPU (scripts/gpu_multi.sh SHARE=1: --gpus 2 with both workers on the one
# GPU: the merged verdict against one process, not a 2-GPU wall time). Correctness only: all in parallel.
#   OUT=/tmp/out bash scripts/gpu_stop23b.sh
set -u
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
T=${T:-330}
mkdir -p "$OUT/gate" "$OUT/multi"
G="python3 -m gate.cli"
for s in 0 1; do
  ( timeout "$T" $G gate --device cuda --candidate triton --baseline impl.candidates.nvfp4_interleaved:Candidate \
      --check nvfp4.gate --check nvfp4.batch --check moe.forward --examples 40 --seed $s --no-failures \
      --json "$OUT/gate/gate_s$s.json" --markdown "$OUT/gate/gate_s$s.md" > "$OUT/gate/gate_s$s.log" 2>&1
    echo "== gate seed $s: exit $?" >> "$OUT/summary.txt" ) &
done
( timeout 120 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_nvfp4_split.py > "$OUT/gate/exact.log" 2>&1
  echo "== exact: exit $?" >> "$OUT/summary.txt" ) &
( OUT=$OUT/multi SHARE=1 LIMIT=$((T - 30)) timeout "$T" bash scripts/gpu_multi.sh --mechanism mhc,nvfp4,dsa \
    --examples 10 > "$OUT/multi/run.txt" 2>&1; echo "== multi: exit $?" >> "$OUT/summary.txt" ) &
wait
cat "$OUT/summary.txt"
for f in "$OUT"/gate/*.log; do echo "=== $f"; grep -v "example \|Warn\|warn(" "$f" | grep -E ": (pass|fail|error)|regress|checks:|passed|failed|verdict" | cut -c1-200 | tail -12; done
echo "=== multi"; grep -v "Warn\|warn(" "$OUT/multi/run.txt" | tail -25 | cut -c1-220
tar czf /tmp/stop23b.tgz -C "$OUT" . && mkdir -p /tmp/keep && mv /tmp/stop23b.tgz /tmp/keep/ && rm -rf "${OUT:?}"/* && mv /tmp/keep/stop23b.tgz "$OUT/"
