#!/usr/bin/env bash
# Issue 13 items 5 and 12 on the GPU (bf16, Triton 3.6): the state hand-off checks and the reshaped path
# strategies on compiled kernels, over several seeds, and the four hand-off mutants through the zoo.
# What it must show: every check `pass` on every seed (kda.checkpoint: checkpoints at any depth within the
# bf16 core budget; model.paths: continuation.handoff exact, continuation_bfloat16.handoff within 2^-8 and
# its logits inside the bf16 quantization gate, whose bounds were set without a GPU measurement: read the
# "worst seen" line of model.paths for the gate's fraction of its budget); kda.paths, mla.paths and
# mla.causal pass on the new draws; the zoo reports all four mutants caught. Logs and JSON under $OUT.
# Usage: bash scripts/gpu_issue13_handoff.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
step() { local t0=$(date +%s); "$@"; local rc=$?; echo "== exit $rc in $(( $(date +%s) - t0 )) s: ${*:3:6}"; }
for seed in ${SEEDS:-0 1 2}; do
  step timeout ${T_RUN:-240} python3 -m gate.cli run --device cuda --check kda.checkpoint --check kda.paths \
    --check mla.paths --check mla.causal --check model.paths --examples ${EX:-40} --seed $seed --no-failures \
    --json "$OUT/handoff_seed$seed.json" > "$OUT/handoff_seed$seed.log" 2>&1
  grep -v "Warn\|warn(\|: example " "$OUT/handoff_seed$seed.log" | grep -E "^  [a-z]|checks:|continuation_bfloat16" | head -40
done
step timeout ${T_ZOO:-180} python3 -m gate.cli zoo --device cuda --mutant kda_checkpoint_cache_chunk_units \
  --mutant kda_checkpoint_aligned_for_unaligned --mutant model_restore_bf16_recurrent \
  --mutant model_restore_transposed_kda_state > "$OUT/zoo.log" 2>&1
grep -v "Warn\|warn(\|: example " "$OUT/zoo.log" | tail -n 20
