#!/usr/bin/env bash
# RUN in stop 53 (H100): step 49 landed; step 51 gated at seed 92 and probed. Kept as the record of its call.
# The next GPU call after stop 52: issue 14 step 49 (the Gluon producer warp group, impl.candidates.mla_producer, now
# with the paged cache) gated again and, by the rule below, landed (scripts/patches/step49.patch: PRODUCER = True).
#  check    scripts/mla_producer_probe.py --check (90 s: an mbarrier hang ends here); nothing else of step 49 runs
#           unless it passed
#  gates    against ours at seeds 92 and 93, 20 examples a check: mla.absorbed (its new tiny empty-split pin: 8 rows
#           over 24 tokens, topk 256), batch, absorbed_paged, paths, graph_replay; mla.causal at 92
#  tests    tests/test_mla_producer.py's GPU tests (the reference; paged = contiguous bits) beside test_mla_heads64's
#  zoo      the four producer mutants (through the candidate), mla_producer_empty_lse_zero among them: it escaped in
#           stop 52; the new pin is meant to catch it
#  land     if the gates, the tests and the zoo (4 caught) passed: step49.patch on the device's tree, then ours'
#           GPU matrix at seeds 94 and 95 (mla checks and model.paths), the MLA GPU tests (the paged bits now through
#           the producer) and the cuda zoo on the four split-path mutants of the Triton kernel, then the bench
#  step 51 (impl.candidates.mla_producer_bw64: blocks of 64) its --check, its gate at seed 92 beside step 49's, and
#           at the end (time left) the probe: chain / producer / bw64, kernel and decode, B = 8-256. Lands nothing
#   OUT=/tmp/out bash scripts/gpu_stop53.sh      (~380 s)
set -u
NAME=${NAME:-stop53}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
python3 -c "import triton; print('triton', triton.__version__)" | tee -a "$L/summary.txt"
step check 90 python3 scripts/mla_producer_probe.py --check
WS=0; grep -q "exit 0" <(grep "== check" "$L/summary.txt") && WS=1
echo "step 49 check passed: $WS" | tee -a "$L/summary.txt"
[ "$WS" = 1 ] || { echo "=== summary"; cat "$L/summary.txt"; tail -20 "$L/check.log"; exit 0; }
step check51 90 python3 scripts/mla_producer_probe.py --check bw64
B64=0; grep -q "exit 0" <(grep "== check51" "$L/summary.txt") && B64=1
[ "$B64" = 1 ] && step gate51_s92 200 python3 -m gate.cli gate --device cuda --baseline triton --examples 20 \
    --no-failures --candidate impl.candidates.mla_producer_bw64:Candidate --check mla.absorbed --check mla.batch \
    --check mla.absorbed_paged --check mla.paths --check mla.graph_replay --seed 92 &
G="--device cuda --baseline triton --examples 20 --no-failures --candidate impl.candidates.mla_producer:Candidate"
for s in 92 93; do
  step gate_ws_s$s 200 python3 -m gate.cli gate $G --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
      --check mla.paths --check mla.graph_replay --seed $s &
done
step gate_ws_2_s92 200 python3 -m gate.cli gate $G --check mla.causal --seed 92 &
step tests_ws 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_producer.py tests/test_mla_heads64.py &
step zoo_ws 150 python3 -m gate.cli zoo --device cuda --mutant mla_producer_no_rescale \
    --mutant mla_producer_empty_lse_zero --mutant mla_producer_mask_a_block_late \
    --mutant mla_producer_gathers_the_next_block &
wait
TW=0; tail -1 "$L/tests_ws.log" | grep -qE "[0-9]+ passed" && ! tail -1 "$L/tests_ws.log" | grep -qE "failed|error" && TW=1
ZW=$(grep -cE "^│ mla_producer_[a-z_]+ +│ caught" "$L/zoo_ws.log")
LAND=0; [ "$(passed gate_ws)" = 1 ] && [ "$TW" = 1 ] && [ "$ZW" = 4 ] && LAND=1
echo "gates passed: $(passed gate_ws); tests: $TW; producer mutants caught: $ZW of 4; step 49 lands: $LAND" \
    | tee -a "$L/summary.txt"
if [ "$LAND" = 1 ] && [ "$SECONDS" -lt 330 ]; then
  git apply scripts/patches/step49.patch && echo "landed on the device's tree: step49.patch" | tee -a "$L/summary.txt"
  R="--device cuda --examples 20 --no-failures"
  for s in 94 95; do
    step matrix_s$s 150 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
        --check mla.graph_replay --seed $s &
    step matrix_2_s$s 150 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths --seed $s &
  done
  step testsl 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_producer.py tests/test_mla_heads64.py \
      tests/test_mla_merge.py &
  step zoo 150 python3 -m gate.cli zoo --device cuda --mutant mla_combine_drops_last_split \
      --mutant mla_split_empty_lse_zero --mutant mla_online_softmax_no_rescale --mutant mla_prefetch_skips_a_block &
  wait
  [ "$SECONDS" -lt 520 ] && step bench_mla 40 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
fi
wait
[ "$B64" = 1 ] && [ "$SECONDS" -lt 560 ] && step probe 45 python3 scripts/mla_producer_probe.py --forms bw64 \
    --json "$L/probe.json"
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && grep -E "REGRESSION|FAIL" "$f" | head -3 | cut -c1-220; done
for f in "$L"/tests*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(tail -1 "$f" | cut -c1-200)"; done
for f in "$L"/zoo*.log; do [ -f "$f" ] && grep -E "^│ [a-z]" "$f" | cut -c1-90; done
grep -E "check " "$L/check.log" "$L/check51.log"
[ -f "$L/probe.log" ] && grep -E "us \[" "$L/probe.log" | cut -c1-170
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -10 | cut -c1-200
true
