#!/usr/bin/env bash
# The CPU gate of every candidate still owed a GPU verdict, before the device session (stop 34's lesson: the
# step 23 NaN reproduced on the CPU, but only the gate's drawn examples found it, not the candidate's own
# tests). Each candidate against ours, on the checks its docstring names, over SEEDS with EX examples.
#   OUT=dir SEEDS="0 1" EX=15 ONLY="kda_intra_gc norms_fused" bash scripts/cpu_gate_candidates.sh
set -u
OUT=${OUT:-/tmp/cpu_gates}; SEEDS=${SEEDS:-0}; EX=${EX:-15}; ONLY=${ONLY:-}
mkdir -p "$OUT"
declare -A CHECKS=(
  [kda_intra_tuned]="kda.chunked kda.causal kda.paths kda.packed kda.batch"
  [kda_intra_gc]="kda.chunked kda.causal kda.paths kda.packed kda.batch"
  [kda_gate_fused]="kda.chunked kda.causal kda.paths kda.packed kda.batch kda.sublayer model.paths"
  [kda_intra_blocked]="kda.chunked kda.causal kda.paths kda.packed kda.batch kda.sublayer"
  [kda_decode_split]="kda.decode kda.paths kda.sublayer kda.batch"
  [norms_fused]="kda.sublayer mla.paths model.paths"
  [cache_in_place]="mla.paths mla.causal dsa.pooled model.paths model.causal serving.state_machine"
  [nvfp4_prefill_split]="nvfp4.gate moe.forward"
)
names=${ONLY:-kda_gate_fused kda_intra_gc kda_intra_tuned kda_decode_split norms_fused cache_in_place nvfp4_prefill_split kda_intra_blocked}
rc_all=0
for name in $names; do
  for seed in $SEEDS; do
    args=(); for c in ${CHECKS[$name]}; do args+=(--check "$c"); done
    start=$(date +%s)
    python3 -m gate.cli gate --device cpu --candidate "impl.candidates.$name:Candidate" --baseline triton \
      "${args[@]}" --examples "$EX" --seed "$seed" --json "$OUT/$name.seed$seed.json" \
      --failures "$OUT/failures" > "$OUT/$name.seed$seed.log" 2>&1
    rc=$?; [ $rc -ne 0 ] && rc_all=1
    echo "$name seed $seed: exit $rc, $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
  done
done
exit $rc_all
