#!/usr/bin/env bash
# The KDA intra kernel's first-row anchor on the GPU (bf16, Triton 3.6): the KDA row of the matrix over
# several seeds (kda.causal included: bitwise causality of chunked and recurrent), and the old row-7
# anchor (mutant kda_intra_anchor_middle, float32) through the zoo. Logs and JSON under $OUT.
set -u
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
rc=0
for seed in ${SEEDS:-0 1}; do
  t0=$(date +%s)
  timeout ${T_RUN:-120} python3 -m gate.cli run --device cuda --mechanism kda --examples ${RUN_EX:-30} --seed $seed \
    --no-failures --json "$OUT/kda_seed$seed.json" > "$OUT/kda_seed$seed.log" 2>&1 || rc=$?
  echo "== kda seed $seed: exit $? in $(( $(date +%s) - t0 )) s"
done
t0=$(date +%s)
timeout ${T_ZOO:-90} python3 -m gate.cli zoo --device cuda --mutant kda_intra_anchor_middle > "$OUT/kda_zoo.log" 2>&1
echo "== kda zoo: exit $? in $(( $(date +%s) - t0 )) s"
for f in "$OUT"/kda_*.log; do echo "=== $f"; grep -v "Warning\|warn(\|: example " "$f" | tail -n 14; done
exit $rc
