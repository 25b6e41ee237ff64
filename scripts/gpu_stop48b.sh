#!/usr/bin/env bash
# Stop 48's second GPU call (one machine start, after refused starts: everything left, verdicts first):
#  gates    side by side, 20 examples a check, against ours:
#           step 14's candidate in its final form (impl.candidates.norms_fused: the norm kernel with a block of
#           BM rows a program, BM = 1 on the GPU) at seeds 82 and 83: kda.sublayer + kda.paths, mla.paths +
#           model.paths; step 44's (impl.candidates.mla_merge_chunks: the split merge's rank in chunks of 128):
#           mla.absorbed + mla.batch at 86 and 87, absorbed_paged / graph_replay / paths / causal at 86
#  land14   if step 14's gates all passed: .whl/step14.patch (its landing commit) applied to the device's tree;
#           the norms' GPU tests and glmgate zoo --device cuda on its three kernel mutants (side by side); then
#           alone the three layer kinds' decode-step replays, ours against impl.candidates.norms_torch
#  probe44  alone: scripts/mla_merge_chunk_probe.py (attend, ours against step 44's candidate, B = 1-32; at B = 1
#           the harness's L2 flush: zeroed, read, none, with the dense SDPA peer)
#  land44   if step 44's gates passed too: .whl/step44.patch applied; test_mla_merge's GPU tests, the cuda zoo on
#           the six MLA kernel mutants; glmgate bench --mechanism mla
#   OUT=/tmp/out bash scripts/gpu_stop48b.sh
set -u
NAME=${NAME:-stop48b}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
G="--device cuda --baseline triton --examples 20 --no-failures"
C14="--candidate impl.candidates.norms_fused:Candidate"
C44="--candidate impl.candidates.mla_merge_chunks:Candidate"
for s in 82 83; do
  step gate14_kda_s$s 240 python3 -m gate.cli gate $G $C14 --check kda.sublayer --check kda.paths --seed $s &
  step gate14_model_s$s 240 python3 -m gate.cli gate $G $C14 --check mla.paths --check model.paths --seed $s &
done
step gate44_s86 240 python3 -m gate.cli gate $G $C44 --check mla.absorbed --check mla.batch --seed 86 &
step gate44_s87 240 python3 -m gate.cli gate $G $C44 --check mla.absorbed --check mla.batch --seed 87 &
step gate44_2_s86 240 python3 -m gate.cli gate $G $C44 --check mla.absorbed_paged --check mla.graph_replay \
    --check mla.paths --check mla.causal --seed 86 &
wait
P14=$(passed gate14); P44=$(passed gate44)
echo "gate14 all passed: $P14; gate44 all passed: $P44" | tee -a "$L/summary.txt"
if [ "$P14" = 1 ]; then
  { git apply .whl/step14.patch || patch -p1 < .whl/step14.patch; } && echo "step 14 landed on the device's tree" | tee -a "$L/summary.txt"
  step tests14 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_norms.py tests/test_norm_seams.py &
  step zoo14 200 python3 -m gate.cli zoo --device cuda --mutant kda_norm_kernel_gate_dropped \
      --mutant kda_norm_kernel_mean_over_one_more --mutant mla_norm_kernel_latent_unweighted &
  wait
  [ "$SECONDS" -lt 280 ] && step replay 90 python3 scripts/profile_replay.py \
      --kinds kda+dense,kda+sparse,dsa-full+sparse --peer impl.candidates.norms_torch:Candidate --repeats 5 \
      --json "$L/replay.json"
fi
[ "$SECONDS" -lt 330 ] && step probe44 100 python3 scripts/mla_merge_chunk_probe.py --json "$L/probe44.json"
if [ "$P14" = 1 ] && [ "$P44" = 1 ] && [ "$SECONDS" -lt 420 ]; then
  { git apply .whl/step44.patch || patch -p1 < .whl/step44.patch; } && echo "step 44 landed on the device's tree" | tee -a "$L/summary.txt"
  step tests44 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge.py &
  step zoo44 60 python3 -m gate.cli zoo --device cuda --mutant mla_merge_chunk_reads_the_first_chunk \
      --mutant mla_combine_drops_last_split --mutant mla_split_empty_lse_zero --mutant mla_online_softmax_no_rescale \
      --mutant mla_prefetch_skips_a_block --mutant mla_paged_first_row_table &
  wait
  [ "$SECONDS" -lt 480 ] && step bench_mla 25 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
fi
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log; do echo "-- $f"; grep -E "│ (kda|mla|model)|checks:|FAIL|Error|REGRESSION" "$f" | cut -c1-170; done
for f in "$L"/tests*.log; do [ -f "$f" ] && tail -2 "$f" | cut -c1-200; done
for f in "$L"/zoo*.log; do [ -f "$f" ] && grep -E "caught|escaped|not run|error" "$f" | cut -c1-120 | tail -8; done
[ -f "$L/replay.log" ] && grep -E "^copy|^===|bytes floor|compare" "$L/replay.log" | cut -c1-230
[ -f "$L/probe44.log" ] && grep -vE "Warn|warn|rel-L2" "$L/probe44.log" | cut -c1-250
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -14 | cut -c1-200
true
