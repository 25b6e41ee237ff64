#!/usr/bin/env bash
# Issue 13 items 3 and 4 on the GPU (compiled Triton; serving.state_machine runs float32 on every device):
# the serving check over several seeds with the verify rows, recycled slots and prefix hits with a
# suffix in its drawn programs, then the serving mutants through the zoo. What it must show: every run
# "1 checks: 1 passed" (zero false alarms of the compiled kernels on verify rows: every position's logits
# within the contract), and every listed mutant "caught" by serving.state_machine at a pinned program.
# Logs and JSON under $OUT. Usage: bash scripts/gpu_serving_verify.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
step() { local t0=$(date +%s); "$@"; local rc=$?; echo "== exit $rc in $(( $(date +%s) - t0 )) s: ${*:3:6}"; }
for seed in ${SEEDS:-0 1 2}; do
  step timeout ${T_RUN:-180} python3 -m gate.cli run --device cuda --check serving.state_machine --examples ${EX:-40} \
    --seed $seed --no-failures --json "$OUT/serving_seed$seed.json" > "$OUT/serving_seed$seed.log" 2>&1
  grep -v "Warn\|warn(\|: example " "$OUT/serving_seed$seed.log" | grep -E "^  [a-z]|checks:" | head -10
done
step timeout ${T_ZOO:-240} python3 -m gate.cli zoo --device cuda --mutant serving_verify_conv_first_token_only \
  --mutant serving_first_chunk_routed_as_decode --mutant serving_short_extend_drops_initial_state \
  --mutant serving_fresh_slot_times_zero --mutant serving_slot_reuse_keeps_state > "$OUT/zoo_serving.log" 2>&1
grep -v "Warn\|warn(\|: example " "$OUT/zoo_serving.log" | tail -n 20
