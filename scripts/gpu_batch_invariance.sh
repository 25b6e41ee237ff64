#!/usr/bin/env bash
# Issue 13 item 2 on the GPU in one call: the batch-invariance and run-twice checks (kda/dsa/mla/moe/mhc/
# nvfp4 .batch, dsa/mla/moe/mhc/nvfp4 .rerun, kda.rerun) in bf16 over several seeds and in float32 once,
# the eleven planted mutants through the zoo, and the KDA cost of the per-row state-pass rule
# (scripts/kda_batch_cost.py). Logs and JSON under $OUT. Usage: bash scripts/gpu_batch_invariance.sh
#
# What it must show: every check passes on the compiled kernels (the claims of impl/kda.py, impl/mhc.py,
# impl/nvfp4.py exact; dsa/mla/moe within their bounds, MLA's flash-decoding splits now following B·S),
# with the worst error/limit per check; every mutant "caught"; and, from kda_batch_cost, every row equal
# to itself alone under the per-row rule (and which rows the old batch rule moved), with the state
# pass's time per-row rule / old rule. kda_segments_from_batch is not in the zoo list: a GPU cuts a row
# into segments from 32 chunks (2048 tokens) on, and kda.batch's rows stop at 80 tokens (the
# interpreter cuts from 2 chunks, where the zoo catches it); kda_batch_cost.py is its GPU evidence.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
step() { local t0=$(date +%s); "$@"; local rc=$?; echo "== exit $rc in $(( $(date +%s) - t0 )) s: ${*:3:6}"; }
CHECKS="--check kda.batch --check dsa.batch --check mla.batch --check moe.batch --check mhc.batch --check nvfp4.batch \
  --check kda.rerun --check dsa.rerun --check mla.rerun --check moe.rerun --check mhc.rerun --check nvfp4.rerun"
show() { grep -v "Warn\|warn(\|: example " "$1" | grep -E "^  [a-z]|checks:|worst seen" | head -60; }
for seed in ${SEEDS:-0 1 2}; do
  step timeout ${T_RUN:-110} python3 -m gate.cli run --device cuda $CHECKS --examples ${EX:-40} --seed $seed \
    --no-failures --json "$OUT/batch_bf16_seed$seed.json" > "$OUT/batch_bf16_seed$seed.log" 2>&1
  show "$OUT/batch_bf16_seed$seed.log"
done
step timeout ${T_F32:-90} python3 -m gate.cli run --device cuda --dtype float32 $CHECKS --examples ${EX32:-20} \
  --no-failures --json "$OUT/batch_f32.json" > "$OUT/batch_f32.log" 2>&1
show "$OUT/batch_f32.log"
step timeout ${T_ZOO:-90} python3 -m gate.cli zoo --device cuda \
  --mutant dsa_anchor_from_batch --mutant dsa_topk_ties_raced --mutant mla_first_row_selection \
  --mutant mla_split_partials_raced --mutant moe_capacity_drops_tokens --mutant moe_router_ties_raced \
  --mutant mhc_reduction_split_by_tokens --mutant mhc_split_k_raced --mutant nvfp4_activation_scale_from_batch \
  --mutant nvfp4_stochastic_rounding > "$OUT/zoo.log" 2>&1
grep -v "Warn\|warn(\|: example " "$OUT/zoo.log" | grep -E "^│ [a-z]|caught|escaped" | head -30
step timeout ${T_COST:-240} python3 scripts/kda_batch_cost.py > "$OUT/kda_batch_cost.log" 2>&1
cat "$OUT/kda_batch_cost.log"
