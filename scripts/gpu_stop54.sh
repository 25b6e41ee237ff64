#!/usr/bin/env bash
# RUN in stop 54 (H100): step 51's landing form landed. Kept as the record of its call.
# The next GPU call after stop 53: issue 14 step 51's landing form (impl.candidates.mla_producer_bw64_16: the
# producer kernel's blocks of 64 entries from 16 query rows on) gated and, by the rule in docs/optimization_log.md
# "Step 51" (written before this call), landed (scripts/patches/step51.patch: impl.mla.PRODUCER_BW64_ROWS = 16).
#  gates    against ours (the producer kernel, blocks of 32) at seeds 93 and 94, 20 examples a check: mla.absorbed,
#           batch, absorbed_paged, paths, graph_replay; mla.causal at 93
#  tests    tests/test_mla_producer.py's GPU tests (the reference and the paged bits at blocks of 32 and 64)
#  zoo      the five producer mutants: step 49's four through ours, the half-block one through the blocks of 64
#  land     if the gates, the tests and the zoo (5 caught) passed: step51.patch on the device's tree, then ours' GPU
#           matrix at seeds 95 and 96 (mla checks and model.paths), the MLA GPU tests, the bench, and the probe
#           (chain / producer / bw64 / bw64_16: kernel and decode, B = 8-256, 5 alternating rounds)
#   OUT=/tmp/out bash scripts/gpu_stop54.sh      (~300 s)
set -u
NAME=${NAME:-stop54}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
python3 -c "import triton; print('triton', triton.__version__)" | tee -a "$L/summary.txt"
step check 90 python3 scripts/mla_producer_probe.py --check bw64
grep -q "exit 0" <(grep "== check" "$L/summary.txt") || { echo "=== summary"; cat "$L/summary.txt"; tail -20 "$L/check.log"; exit 0; }
G="--device cuda --baseline triton --examples 20 --no-failures --candidate impl.candidates.mla_producer_bw64_16:Candidate"
for s in 93 94; do
  step gate51_s$s 220 python3 -m gate.cli gate $G --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
      --check mla.paths --check mla.graph_replay --seed $s &
done
step gate51_2_s93 220 python3 -m gate.cli gate $G --check mla.causal --seed 93 &
step tests51 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_producer.py &
step zoo51 200 python3 -m gate.cli zoo --device cuda --mutant mla_producer_no_rescale \
    --mutant mla_producer_empty_lse_zero --mutant mla_producer_mask_a_block_late \
    --mutant mla_producer_gathers_the_next_block --mutant mla_producer_copies_half_a_block &
wait
TW=0; tail -1 "$L/tests51.log" | grep -qE "[0-9]+ passed" && ! tail -1 "$L/tests51.log" | grep -qE "failed|error" && TW=1
ZW=$(grep -cE "^│ mla_producer_[a-z_]+ +│ caught" "$L/zoo51.log")
LAND=0; [ "$(passed gate51)" = 1 ] && [ "$TW" = 1 ] && [ "$ZW" = 5 ] && LAND=1
echo "gates passed: $(passed gate51); tests: $TW; producer mutants caught: $ZW of 5; step 51 lands: $LAND" \
    | tee -a "$L/summary.txt"
if [ "$LAND" = 1 ] && [ "$SECONDS" -lt 330 ]; then
  git apply scripts/patches/step51.patch && echo "landed on the device's tree: step51.patch" | tee -a "$L/summary.txt"
  R="--device cuda --examples 20 --no-failures"
  for s in 95 96; do
    step matrix_s$s 150 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
        --check mla.graph_replay --seed $s &
    step matrix_2_s$s 150 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths --seed $s &
  done
  step testsl 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_producer.py tests/test_mla_heads64.py \
      tests/test_mla_merge.py &
  wait
  [ "$SECONDS" -lt 480 ] && step bench_mla 40 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
fi
[ "$SECONDS" -lt 520 ] && step probe 60 python3 scripts/mla_producer_probe.py --forms bw64,bw64_16 --json "$L/probe.json"
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && grep -E "REGRESSION|FAIL" "$f" | head -3 | cut -c1-220; done
for f in "$L"/tests*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(tail -1 "$f" | cut -c1-200)"; done
for f in "$L"/zoo*.log; do [ -f "$f" ] && grep -E "^│ [a-z]" "$f" | cut -c1-90; done
grep -E "check " "$L/check.log"
[ -f "$L/probe.log" ] && grep -E "us \[" "$L/probe.log" | cut -c1-170
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -10 | cut -c1-200
true
