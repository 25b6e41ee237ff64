#!/usr/bin/env bash
# Issue 13's GPU verdicts in ONE device call (device time is scarce): every group below is its own
# process, all in parallel on one GPU + 16 cores, each bounded by $T seconds, logs under $OUT as they
# run (a call that runs out still brings back what finished). Run from the repository root:
#   OUT=/tmp/out T=400 bash scripts/gpu_issue13.sh
# Groups: causality (item 1), batch invariance and run-twice determinism (2), serving verify rows and
# recycled slots (3, 4), checkpoints and the model hand-off (5), CUDA-graph replay (6), the full-geometry
# pins (7, 8), kernel paths (11), the zoo of every mutant added for issue 13 on CUDA in bf16, the 2^31
# nightly pin with its GPU-only mutant, and the CUDA-only tests.
set -u
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
OUT=${OUT:-/tmp/out}
T=${T:-400}
EX=${EX:-25}
mkdir -p "$OUT"
G="python3 -m gate.cli"
group() {  # group NAME COMMAND...: run in the background, its exit and seconds into summary.txt
  local name=$1; shift
  # ONLY="serving_s0 graph_triton ...": run just those groups (a later call finishing an earlier one)
  [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $name "* ]] || return 0
  ( t0=$(date +%s); timeout "$T" "$@" > "$OUT/$name.log" 2>&1; rc=$?
    echo "== $name: exit $rc in $(( $(date +%s) - t0 )) s" >> "$OUT/summary.txt" ) &
}
run() { local name=$1; shift; group "$name" $G run --device cuda --no-failures --json "$OUT/$name.json" "$@"; }

CAUSAL="--check kda.causal --check mla.causal --check model.causal"
BATCH="--check kda.batch --check dsa.batch --check mla.batch --check moe.batch --check mhc.batch --check nvfp4.batch"
RERUN="--check kda.rerun --check dsa.rerun --check mla.rerun --check moe.rerun --check mhc.rerun --check nvfp4.rerun"
run causal_s0 $CAUSAL --examples "$EX" --seed 0
run causal_s1 $CAUSAL --examples "$EX" --seed 1
run batch_s0 $BATCH $RERUN --examples "$EX" --seed 0
run batch_s1 $BATCH $RERUN --examples "$EX" --seed 1
run graph_triton --check kda.graph_replay --check mla.graph_replay --examples $((EX * 2)) --seed 0
run graph_torch --impl torch --check kda.graph_replay --check mla.graph_replay --examples "$EX" --seed 1
run serving_s0 --check serving.state_machine --examples "$EX" --seed 0
run serving_s1 --check serving.state_machine --examples "$EX" --seed 1
run handoff_s0 --check kda.checkpoint --check kda.paths --check model.paths --examples "$EX" --seed 0
# the CUDA pins: kda.scale at H = 64, K = 128, T = 16K and 2 x 64K; the released indexer (2051 slots) at
# lengths around its budget; 4096 tokens through the released router
run scale --check kda.scale --check dsa.index --check mla.absorbed --check moe.route --examples 4 --seed 0
run scale_mla_moe --check mla.absorbed --check moe.route --examples 4 --seed 0
# the kernels' paths on CUDA (the checks whose CUDA pins are the scale group's left out)
group paths $G run --device cuda --no-failures --kernel-paths --examples 6 --check kda.chunked --check kda.decode \
  --check kda.recurrent --check kda.packed --check mla.paths --check mla.absorbed_paged --check dsa.index_paged \
  --check mhc.coefficients --check mhc.write_back --check moe.forward --check nvfp4.gate
# every mutant added since issue 13 began (the GPU-only one below)
NEW="dsa_anchor_from_batch dsa_paged_page_past_row dsa_paged_whole_last_page dsa_topk_ties_raced
kda_checkpoint_aligned_for_unaligned kda_checkpoint_cache_chunk_units kda_decode_in_place_past_state
kda_graph_live_rows_at_capture kda_graph_padding_keeps_slots kda_intra_anchor_middle kda_intra_k_tiles_not_accumulated
kda_segments_from_batch mhc_reduction_split_by_tokens mhc_split_k_raced mla_combine_drops_last_split
mla_first_row_selection mla_graph_lengths_rebound mla_graph_width_at_capture mla_online_softmax_no_rescale
mla_paged_first_row_table mla_softmax_max_over_masked_keys mla_split_empty_lse_zero mla_split_partials_raced
model_expert_gemm_over_routed_rows model_restore_bf16_recurrent model_restore_transposed_kda_state
moe_bias_in_working_dtype moe_capacity_drops_tokens moe_dropped_groups_masked_zero moe_forward_output_in_input
moe_router_ties_raced moe_tie_at_cut_nan nvfp4_activation_scale_from_batch nvfp4_expert_swizzled_scales_read_linear
nvfp4_fused_gate_scale_both_halves nvfp4_stochastic_rounding serving_first_chunk_routed_as_decode
serving_fresh_slot_times_zero serving_short_extend_drops_initial_state serving_verify_conv_first_token_only"
i=0; A=""; B=""; C=""
for m in $NEW; do case $((i % 3)) in 0) A="$A --mutant $m";; 1) B="$B --mutant $m";; 2) C="$C --mutant $m";; esac; i=$((i+1)); done
group zoo_a $G zoo --device cuda $A
group zoo_b $G zoo --device cuda $B
group zoo_c $G zoo --device cuda $C
# the nightly pin (5 x 64K x 64 heads x 128: past 2^31 elements) with the 32-bit offset mutant
group zoo_int32 $G zoo --device cuda --mutant kda_intra_offsets_int32
# our own product on the nightly pin (the 2^31-element case itself, not only its mutant)
run nightly --check kda.scale --profile nightly --examples 1 --seed 0
# the serving mutants alone (their zoo lines were cut from an earlier call's output)
group zoo_serving $G zoo --device cuda --mutant serving_verify_conv_first_token_only \
  --mutant serving_fresh_slot_times_zero --mutant serving_short_extend_drops_initial_state
# the CUDA-only tests but the GPU-only mutant's (zoo_int32 runs the same)
group pytest_gpu python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_framework_mutants.py tests/test_kda_gpu.py \
  -k "not gpu_only_mutant_is_caught"
wait
cat "$OUT/summary.txt"
for f in "$OUT"/*.log; do
  echo "=== $(basename "$f")"
  grep -v "Warn\|warn(\|: example " "$f" | grep -E "^  [a-z]|checks:|caught|ESCAPED|escaped|GPU only|Error|FAIL|passed|failed|kernel paths" | cut -c1-160 | head -60
done
# the device tool brings back a few files only: everything in one archive beside the summary
tar czf /tmp/issue13_all.tgz -C "$OUT" . && rm -f "$OUT"/*.json "$OUT"/*.log && mv /tmp/issue13_all.tgz "$OUT/"
