#!/usr/bin/env bash
# Issue 12's kernel changes on the GPU in one call (bf16, Triton 3.6): the sm_90 compile check of the
# changed kernels, the mechanism rows of the matrix over several seeds (per-half / swizzled NVFP4 scales
# in the MoE kernels, the paged MLA kernel and indexer gather, the KDA first-row anchor with kda.causal),
# and the new mutants through the zoo. Logs and JSON under $OUT. Usage: bash scripts/gpu_issue12_verdicts.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
step() { local t0=$(date +%s); "$@"; local rc=$?; echo "== exit $rc in $(( $(date +%s) - t0 )) s: ${*:3:6}"; }
step timeout ${T_COMPILE:-60} python3 -m gate.cli kernels --kernel moe_gate_up_fwd_kernel --kernel moe_down_fwd_kernel \
  --kernel mla_sparse_absorbed_fwd_kernel --kernel kda_intra_chunked_fwd_kernel > "$OUT/compile.log" 2>&1
tail -n 20 "$OUT/compile.log"
for seed in ${SEEDS:-0 1}; do
  step timeout ${T_RUN:-190} python3 -m gate.cli run --device cuda --mechanism kda,dsa,mla,moe,nvfp4 --examples ${EX:-25} \
    --seed $seed --no-failures --json "$OUT/run_seed$seed.json" > "$OUT/run_seed$seed.log" 2>&1
  grep -v "Warn\|warn(\|: example " "$OUT/run_seed$seed.log" | grep -E "^  [a-z]|checks:" | head -40
done
step timeout ${T_ZOO:-120} python3 -m gate.cli zoo --device cuda --mutant kda_intra_anchor_middle \
  --mutant nvfp4_fused_gate_scale_both_halves --mutant nvfp4_expert_swizzled_scales_read_linear \
  --mutant dsa_paged_page_past_row --mutant dsa_paged_whole_last_page --mutant mla_paged_first_row_table \
  > "$OUT/zoo.log" 2>&1
grep -v "Warn\|warn(\|: example " "$OUT/zoo.log" | tail -n 20
