#!/usr/bin/env bash
# Stop 49's GPU call (one machine start: everything, verdicts first):
#  gates    side by side, 20 examples a check, against ours: step 45's candidate (impl.candidates.mla_splits_w:
#           one-block splits from W alone below ROWS_64 rows, the merge in one load of up to 64 splits, the rank
#           in chunks) at seeds 90 and 91: mla.absorbed + mla.batch; mla.absorbed_paged + mla.graph_replay +
#           mla.paths + mla.causal; beside them test_mla_merge's GPU tests (the candidate among them)
#  probe45  alone: scripts/mla_merge_chunk_probe.py, ours against the candidate: attend at B = 1 (128K, 32K),
#           2, 4, 7, 8, 32 (32K); at B = 1 128K the three L2 flushes with the dense SDPA peer, kernel times
#  replay   on an H200 only: the three layer kinds' decode-step replays (ours against impl.candidates.norms_torch)
#  land45   if every gate passed: .whl/step45.patch applied (ours takes the candidate's GPU rule); test_mla_merge's
#           and test_mla_heads64's GPU tests, the cuda zoo on the four split-path kernel mutants; glmgate bench
#           --mechanism mla
#   OUT=/tmp/out bash scripts/gpu_stop49.sh   (carry .whl)
set -u
NAME=${NAME:-stop49}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "device: $GPU" | tee -a "$L/summary.txt"
G="--device cuda --baseline triton --examples 20 --no-failures"
C45="--candidate impl.candidates.mla_splits_w:Candidate"
for s in 90 91; do
  step gate45_s$s 240 python3 -m gate.cli gate $G $C45 --check mla.absorbed --check mla.batch --seed $s &
  step gate45_2_s$s 240 python3 -m gate.cli gate $G $C45 --check mla.absorbed_paged --check mla.graph_replay \
      --check mla.paths --check mla.causal --seed $s &
done
step tests45 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge.py &
wait
P45=$(passed gate45)
echo "gate45 all passed: $P45" | tee -a "$L/summary.txt"
[ "$SECONDS" -lt 330 ] && step probe45 150 python3 scripts/mla_merge_chunk_probe.py \
    --candidate impl.candidates.mla_splits_w:mla --label splits_w \
    --shapes 1x131072,1x32768,2x32768,4x32768,7x32768,8x32768,32x32768 --json "$L/probe45.json"
case "$GPU" in *H200*) [ "$SECONDS" -lt 420 ] && step replay 100 python3 scripts/profile_replay.py \
    --kinds kda+dense,kda+sparse,dsa-full+sparse --peer impl.candidates.norms_torch:Candidate --repeats 5 \
    --json "$L/replay.json";; esac
if [ "$P45" = 1 ] && [ "$SECONDS" -lt 470 ]; then
  { git apply .whl/step45.patch || patch -p1 < .whl/step45.patch; } && echo "step 45 landed on the device's tree" | tee -a "$L/summary.txt"
  step tests45l 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge.py tests/test_mla_heads64.py &
  step zoo45 100 python3 -m gate.cli zoo --device cuda --mutant mla_combine_drops_last_split \
      --mutant mla_split_empty_lse_zero --mutant mla_online_softmax_no_rescale --mutant mla_prefetch_skips_a_block &
  wait
  [ "$SECONDS" -lt 560 ] && step bench_mla 30 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
fi
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log; do echo "$f: $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/tests*.log; do [ -f "$f" ] && tail -2 "$f" | cut -c1-200; done
[ -f "$L/zoo45.log" ] && grep -E "caught|escaped|not run|error" "$L/zoo45.log" | cut -c1-120 | tail -8
[ -f "$L/probe45.log" ] && grep -vE "Warn|warn|rel-L2" "$L/probe45.log" | cut -c1-250
[ -f "$L/replay.log" ] && grep -E "^copy|^===|bytes floor|compare" "$L/replay.log" | cut -c1-230
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -14 | cut -c1-200
true
