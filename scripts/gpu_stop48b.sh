#!/usr/bin/env bash
# Stop 48's second GPU call: issue 14 step 14's candidate in its final form (impl.candidates.norms_fused: the
# norm kernel with a block of BM rows a program, BM = 1 on the GPU) gated, then, if every gate passed, landed on
# the device's tree (.whl/step14.patch is the landing commit: ours' three norms launch the kernel) and ours
# checked and timed:
#  gate14b  glmgate gate of the candidate against ours (the torch norms), 20 examples a check, seeds 82 and 83:
#           kda.sublayer + kda.paths, and mla.paths + model.paths, each pair its own process (side by side)
#  land     git apply the landing; the GPU tests of the norms; glmgate zoo --device cuda on the three norm
#           kernel mutants; ours' matrix (glmgate run --device cuda) on the four checks at seed 84; then alone:
#           the three layer kinds' decode-step replays, ours against impl.candidates.norms_torch (the torch
#           norms), 5 alternating runs, the bytes floor at the run's copy speed
#  gate44   beside land's checks: glmgate gate of step 44's candidate (impl.candidates.mla_merge_chunks: the split
#           merge's rank in chunks of 128) against ours, 20 examples a check: mla.absorbed + mla.batch at seeds 86
#           and 87, mla.absorbed_paged / graph_replay / paths / causal at 86
#  probe44  alone, last: scripts/mla_merge_chunk_probe.py (attend, ours against the candidate, B = 1-32; at B = 1
#           the harness's L2 flush: zeroed, read, none, with the dense SDPA peer)
#   OUT=/tmp/out bash scripts/gpu_stop48b.sh
set -u
NAME=${NAME:-stop48b}
PARTS=${PARTS:-gate14b land gate44 probe44}
source "$(dirname "$0")/gpu_steps.sh"
if has gate14b; then
  export OMP_NUM_THREADS=3
  G="--device cuda --candidate impl.candidates.norms_fused:Candidate --baseline triton --examples 20 --no-failures"
  for s in 82 83; do
    step gate14b_kda_s$s 240 python3 -m gate.cli gate $G --check kda.sublayer --check kda.paths --seed $s &
    step gate14b_model_s$s 240 python3 -m gate.cli gate $G --check mla.paths --check model.paths --seed $s &
  done
  wait
fi
PASS=1
for f in "$L"/gate14b_*.log; do grep -q "0 failed, 0 regressions, 0 not covered, 0 errors, 0 not run" "$f" || PASS=0; done
echo "gate14b all passed: $PASS" | tee -a "$L/summary.txt"
if has land && [ "$PASS" = 1 ]; then
  { git apply .whl/step14.patch || patch -p1 < .whl/step14.patch; } && echo "landed on the device's tree" | tee -a "$L/summary.txt"
  export OMP_NUM_THREADS=3
  step tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_norms.py tests/test_norm_seams.py &
  step zoo 200 python3 -m gate.cli zoo --device cuda --mutant kda_norm_kernel_gate_dropped \
      --mutant kda_norm_kernel_mean_over_one_more --mutant mla_norm_kernel_latent_unweighted &
  R="--device cuda --examples 20 --no-failures --seed 84"
  step ours_kda 240 python3 -m gate.cli run $R --check kda.sublayer --check kda.paths &
  step ours_model 240 python3 -m gate.cli run $R --check mla.paths --check model.paths &
fi
if has gate44; then
  G="--device cuda --candidate impl.candidates.mla_merge_chunks:Candidate --baseline triton --examples 20 --no-failures"
  step gate44_s86 240 python3 -m gate.cli gate $G --check mla.absorbed --check mla.batch --seed 86 &
  step gate44_s87 240 python3 -m gate.cli gate $G --check mla.absorbed --check mla.batch --seed 87 &
  step gate44_2_s86 240 python3 -m gate.cli gate $G --check mla.absorbed_paged --check mla.graph_replay \
      --check mla.paths --check mla.causal --seed 86 &
fi
wait
if has land && [ "$PASS" = 1 ]; then
  [ "$SECONDS" -lt 420 ] && step replay 150 python3 scripts/profile_replay.py \
      --kinds kda+dense,kda+sparse,dsa-full+sparse --peer impl.candidates.norms_torch:Candidate --repeats 5 \
      --json "$L/replay.json"
fi
has probe44 && [ "$SECONDS" -lt 470 ] && step probe44 110 python3 scripts/mla_merge_chunk_probe.py --json "$L/probe44.json"
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate14b_*.log; do echo "-- $f"; grep -E "│ (kda|mla|model)|checks:|FAIL|Error|REGRESSION" "$f" | cut -c1-200; done
[ -f "$L/tests.log" ] && tail -3 "$L/tests.log" | cut -c1-200
[ -f "$L/zoo.log" ] && grep -E "caught|escaped|not run|error" "$L/zoo.log" | cut -c1-120 | tail -6
for f in "$L"/ours_*.log; do [ -f "$f" ] && { echo "-- $f"; grep -E "│ (kda|mla|model)|checks:|FAIL|Error" "$f" | cut -c1-200; }; done
[ -f "$L/replay.log" ] && grep -E "^copy|^===|bytes floor|compare" "$L/replay.log" | cut -c1-230
for f in "$L"/gate44_*.log; do [ -f "$f" ] && { echo "-- $f"; grep -E "│ (mla|model)|checks:|FAIL|Error|REGRESSION" "$f" | cut -c1-200; }; done
[ -f "$L/probe44.log" ] && grep -vE "Warn|warn" "$L/probe44.log" | cut -c1-250
true
