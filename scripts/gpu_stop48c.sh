#!/usr/bin/env bash
# Stop 48's third GPU call: stop48b's gates passed (both steps) but its landings found no .whl/ (not carried):
#  land14   .whl/step14.patch applied; the norms' GPU tests and the cuda zoo on its three mutants (side by side);
#           then alone the three layer kinds' decode-step replays, ours against impl.candidates.norms_torch
#  probe44  alone: scripts/mla_merge_chunk_probe.py (its read flush fixed)
#  land44   .whl/step44.patch applied; test_mla_merge's GPU tests, the cuda zoo on the six MLA kernel mutants;
#           glmgate bench --mechanism mla
#   OUT=/tmp/out bash scripts/gpu_stop48c.sh   (carry .whl)
set -u
NAME=${NAME:-stop48c}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=4
{ git apply .whl/step14.patch || patch -p1 < .whl/step14.patch; } && echo "step 14 landed on the device's tree" | tee -a "$L/summary.txt"
step tests14 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_norms.py tests/test_norm_seams.py &
step zoo14 150 python3 -m gate.cli zoo --device cuda --mutant kda_norm_kernel_gate_dropped \
    --mutant kda_norm_kernel_mean_over_one_more --mutant mla_norm_kernel_latent_unweighted &
wait
[ "$SECONDS" -lt 200 ] && step replay 90 python3 scripts/profile_replay.py \
    --kinds kda+dense,kda+sparse,dsa-full+sparse --peer impl.candidates.norms_torch:Candidate --repeats 5 \
    --json "$L/replay.json"
[ "$SECONDS" -lt 250 ] && step probe44 100 python3 scripts/mla_merge_chunk_probe.py --json "$L/probe44.json"
if [ "$SECONDS" -lt 330 ]; then
  { git apply .whl/step44.patch || patch -p1 < .whl/step44.patch; } && echo "step 44 landed on the device's tree" | tee -a "$L/summary.txt"
  step tests44 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge.py &
  step zoo44 60 python3 -m gate.cli zoo --device cuda --mutant mla_merge_chunk_reads_the_first_chunk \
      --mutant mla_combine_drops_last_split --mutant mla_split_empty_lse_zero --mutant mla_online_softmax_no_rescale \
      --mutant mla_prefetch_skips_a_block --mutant mla_paged_first_row_table &
  wait
  [ "$SECONDS" -lt 400 ] && step bench_mla 25 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
fi
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/tests*.log; do [ -f "$f" ] && tail -2 "$f" | cut -c1-200; done
for f in "$L"/zoo*.log; do [ -f "$f" ] && grep -E "caught|escaped|not run|error" "$f" | cut -c1-120 | tail -8; done
[ -f "$L/replay.log" ] && grep -E "^copy|^===|bytes floor|compare" "$L/replay.log" | cut -c1-230
[ -f "$L/probe44.log" ] && grep -vE "Warn|warn|rel-L2" "$L/probe44.log" | cut -c1-250
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -14 | cut -c1-200
true
