#!/usr/bin/env bash
# Issue 14 after step 59 landed (stop 64, ~220 s on an H100): step 60's race mutant again after the merge's output
# moved ahead of the sparse launch (stop 64's first call: it escaped every check because, under the checks' poisoned
# memory, that allocation's NaN fill sat between the two launches and the merge waited on the fill); step 60's GPU
# tests; on this tree (ours with step 59) the MLA GPU tests, ours' MLA matrix at seed 118 (20 examples a check) and
# every MLA mutant that only a GPU runs.
#   OUT=/tmp/out bash scripts/gpu_stop64.sh          (run it with a 400 s timeout)
set -u
NAME=${NAME:-stop64b}
LIMIT=${LIMIT:-330}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
P1=$((LIMIT - 30))
step zoo60 $P1 python3 -m gate.cli zoo --device cuda --mutant mla_merge_pdl_no_wait &
step tests60 $P1 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge_pdl.py &
step tests $P1 python3 -m pytest -q -p no:cacheprovider -m gpu $MLA_GPU_TESTS &
R="--device cuda --examples ${EX:-20} --no-failures --seed 118"
step matrix_s118 $P1 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
    --check mla.graph_replay &
step matrix_2_s118 $P1 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths &
Z="python3 -m gate.cli zoo --device cuda"
step zoo_a $P1 $Z --mutant mla_producer_no_rescale --mutant mla_producer_empty_lse_zero \
    --mutant mla_producer_mask_a_block_late --mutant mla_producer_gathers_the_next_block \
    --mutant mla_producer_copies_half_a_block --mutant mla_producer_ahead_copies_the_next_entries &
step zoo_b $P1 $Z --mutant mla_producer_ahead_prefetches_two_ahead --mutant mla_producer_ahead_second_half_over_the_first \
    --mutant mla_producer_q_heads_step_r --mutant mla_producer_out_uv_unnormalized \
    --mutant mla_producer_staged_store_drops_heads --mutant mla_producer_staged_partials_drop_heads \
    --mutant mla_combine_bf16_drops_last_split --mutant mla_split_empty_lse_zero &
wait
echo "matrix passed $(matrix_passed); tests $(tests_passed "$L/tests.log") $(tests_passed "$L/tests60.log"); mutants caught $(caught_in "$L"/zoo*.log) of 15" | tee -a "$L/summary.txt"
report tests tests60
