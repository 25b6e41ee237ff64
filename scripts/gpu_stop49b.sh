#!/usr/bin/env bash
# Stop 49's second GPU call (step 45's final form; verdicts first):
#  gates    side by side, 20 examples a check, against ours: impl.candidates.mla_splits_b1 (the one-block splits at
#           one query row only) at seeds 92 and 93: mla.absorbed + mla.batch; mla.absorbed_paged + mla.graph_replay +
#           mla.paths + mla.causal
#  probe    alone: scripts/mla_b1_merge_probe.py (ours, the candidate, its merge tile at 4096 and 16384; B = 1, 2)
#  land45   if every gate passed: .whl/step45b.patch applied (ours takes the final form); ours' GPU matrix at seeds
#           94 and 95 (the six mla checks and model.paths, 20 examples), test_mla_merge's and test_mla_heads64's GPU
#           tests, the cuda zoo on the four split-path kernel mutants; then alone glmgate bench --mechanism mla and
#           the dsa-full+sparse decode-step replay against ours before step 45 (impl.candidates.mla_splits_16)
#   OUT=/tmp/out bash scripts/gpu_stop49b.sh   (carry .whl)
set -u
NAME=${NAME:-stop49b}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
G="--device cuda --baseline triton --examples 20 --no-failures"
C="--candidate impl.candidates.mla_splits_b1:Candidate"
for s in 92 93; do
  step gate45b_s$s 240 python3 -m gate.cli gate $G $C --check mla.absorbed --check mla.batch --seed $s &
  step gate45b_2_s$s 240 python3 -m gate.cli gate $G $C --check mla.absorbed_paged --check mla.graph_replay \
      --check mla.paths --check mla.causal --seed $s &
done
wait
passed() { local p=1; for f in "$L"/$1_*.log; do grep -q "0 failed, 0 regressions, 0 not covered, 0 errors, 0 not run" "$f" || p=0; done; echo $p; }
P=$(passed gate45b)
echo "gate45b all passed: $P" | tee -a "$L/summary.txt"
[ "$SECONDS" -lt 300 ] && step probe 90 python3 scripts/mla_b1_merge_probe.py --json "$L/probe.json"
if [ "$P" = 1 ] && [ "$SECONDS" -lt 360 ]; then
  { git apply .whl/step45b.patch || patch -p1 < .whl/step45b.patch; } && echo "step 45 landed on the device's tree" | tee -a "$L/summary.txt"
  R="--device cuda --examples 20 --no-failures"
  for s in 94 95; do
    step matrix_s$s 240 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
        --check mla.graph_replay --seed $s &
    step matrix_2_s$s 240 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths --seed $s &
  done
  step testsl 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge.py tests/test_mla_heads64.py &
  step zoo 150 python3 -m gate.cli zoo --device cuda --mutant mla_combine_drops_last_split \
      --mutant mla_split_empty_lse_zero --mutant mla_online_softmax_no_rescale --mutant mla_prefetch_skips_a_block &
  wait
  [ "$SECONDS" -lt 560 ] && step bench_mla 30 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
  [ "$SECONDS" -lt 580 ] && step replay 45 python3 scripts/profile_replay.py --kinds dsa-full+sparse \
      --peer impl.candidates.mla_splits_16:Candidate --repeats 5 --json "$L/replay.json"
fi
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/tests*.log; do [ -f "$f" ] && tail -1 "$f" | cut -c1-200; done
[ -f "$L/zoo.log" ] && grep -E "caught|escaped|not run|error" "$L/zoo.log" | cut -c1-100 | tail -5
[ -f "$L/probe.log" ] && grep -vE "Warn|warn|rel-L2" "$L/probe.log" | cut -c1-300
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -9 | cut -c1-200
[ -f "$L/replay.log" ] && grep -E "^copy|^===|bytes floor|compare|mla_" "$L/replay.log" | cut -c1-200
true
