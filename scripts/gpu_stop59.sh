#!/usr/bin/env bash
# The tree after steps 52, 54 and 55 landed (issue 14, stop 59; ~250 s): ours' GPU matrix at two more seeds with 40
# examples a check (mla.absorbed, batch, absorbed_paged, graph_replay; mla.paths, causal, model.paths), and every MLA
# kernel mutant on cuda (the Triton kernel's, the producer kernel's, steps 52-57's), each through the namespace that
# runs its code
#   OUT=/tmp/out bash scripts/gpu_stop59.sh
set -u
NAME=${NAME:-stop59}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
for s in 110 111; do
  R="--device cuda --examples 40 --no-failures --seed $s"
  step matrix_s$s 270 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
      --check mla.graph_replay &
  step matrix_2_s$s 270 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths &
done
Z="python3 -m gate.cli zoo --device cuda"
step zoo_a 260 $Z --mutant mla_split_empty_lse_zero --mutant mla_combine_drops_last_split \
    --mutant mla_online_softmax_no_rescale --mutant mla_prefetch_skips_a_block --mutant mla_split_partials_unnormalized \
    --mutant mla_q_strides_rows_as_contiguous --mutant mla_q_strides_heads_step_r &
step zoo_b 260 $Z --mutant mla_producer_no_rescale --mutant mla_producer_empty_lse_zero \
    --mutant mla_producer_mask_a_block_late --mutant mla_producer_gathers_the_next_block \
    --mutant mla_producer_copies_half_a_block --mutant mla_producer_q_heads_step_r &
step zoo_c 260 $Z --mutant mla_producer_ahead_copies_the_next_entries --mutant mla_producer_ahead_prefetches_two_ahead \
    --mutant mla_producer_ahead_second_half_over_the_first --mutant mla_producer_out_uv_unnormalized &
wait
M=1; for f in "$L"/matrix*.log; do grep -qs " 0 failed, 0 errors, 0 not covered, 0 not run" "$f" || M=0; done
echo "matrix passed $M; mutants caught $(cat "$L"/zoo_*.log | grep -cE '^│ mla_[a-z_0-9]+ +│ caught') of 17" \
    | tee -a "$L/summary.txt"
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/matrix*.log; do echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/matrix*.log; do grep -E "FAIL" "$f" | head -3 | cut -c1-220; done
cat "$L"/zoo_*.log | grep -E "^│ [a-z]" | cut -c1-100
true
