#!/usr/bin/env bash
# Stop 49's second GPU call (step 45's forms after the first call's measurement; verdicts, then timing alone):
#  gates    side by side, 20 examples a check, against ours, at seeds 92 and 93 (b1: 92): mla.absorbed + mla.batch;
#           mla.absorbed_paged + mla.graph_replay + mla.paths + mla.causal; for impl.candidates.mla_splits_w1 (the
#           one-block splits from W below 8 rows with one pipeline stage) and impl.candidates.mla_splits_b1 (the
#           one-block splits at one query row only)
#           and step 46's (impl.candidates.mla_merge_one_round) at seed 92 with its GPU tests (same bits as ours)
#  probe    alone: scripts/mla_b1_merge_probe.py (ours, w, w1, b1, one, w1_one, w1's merge tile at 4096 and 16384;
#           B = 1, 2, 4, 7, 8, 32)
#  land     the rule written before the run (docs/optimization_log.md, step 45): w1 if its gate passed, it is
#           >= 1.03x ours at B = 1 (128K) and >= 0.98x at B = 2, 4, 7 (scripts/patches/step45c.patch); else b1 if its gate
#           passed and it is >= 1.03x at B = 1 (scripts/patches/step45b.patch); else nothing. Then ours' GPU matrix at seeds
#           94 and 95 (the six mla checks and model.paths, 20 examples), test_mla_merge's and test_mla_heads64's GPU
#           tests, the cuda zoo on the four split-path kernel mutants; alone glmgate bench --mechanism mla and the
#           dsa-full+sparse decode-step replay against ours before step 45 (impl.candidates.mla_splits_16)
#   OUT=/tmp/out bash scripts/gpu_stop49b.sh   (the patches are tracked: nothing to carry)
set -u
NAME=${NAME:-stop49b}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
G="--device cuda --baseline triton --examples 20 --no-failures"
for c in w1 b1; do
  C="--candidate impl.candidates.mla_splits_$c:Candidate"
  seeds="92 93"; [ "$c" = b1 ] && seeds=92           # b1 is the fallback: one seed (the device budget)
  # SHORT=1 (a device budget near its end): w1 at seed 92 alone, no b1; ours' matrix at seed 94 alone, no replay
  [ "${SHORT:-0}" = 1 ] && { [ "$c" = b1 ] && continue; seeds=92; }
  for s in $seeds; do
    step gate_${c}_s$s 240 python3 -m gate.cli gate $G $C --check mla.absorbed --check mla.batch --seed $s &
    step gate_${c}_2_s$s 240 python3 -m gate.cli gate $G $C --check mla.absorbed_paged --check mla.graph_replay \
        --check mla.paths --check mla.causal --seed $s &
  done
done
if [ "${SHORT:-0}" != 1 ]; then   # step 46 (the merge in one round of loads): its gate at one seed, its GPU tests
  step gate46_s92 240 python3 -m gate.cli gate $G --candidate impl.candidates.mla_merge_one_round:Candidate \
      --check mla.absorbed --check mla.batch --check mla.paths --seed 92 &
  step tests46 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge.py -k one_round &
fi
wait
passed() { local p=1; for f in "$L"/$1_*.log; do grep -q "0 failed, 0 regressions, 0 not covered, 0 errors, 0 not run" "$f" || p=0; done; echo $p; }
echo "gate w1 all passed: $(passed gate_w1); gate b1 all passed: $(passed gate_b1)" | tee -a "$L/summary.txt"
[ "$SECONDS" -lt 300 ] && step probe 150 python3 scripts/mla_b1_merge_probe.py --json "$L/probe.json"
PICK=$(python3 - "$L/probe.json" <<'PY' 2>/dev/null || echo none
import json, sys
d = json.load(open(sys.argv[1]))
r = lambda k, f: d[k]["times"]["ours"]["median_us"] / d[k]["times"][f]["median_us"]
w1 = r("B1_T131072", "w1") >= 1.03 and all(r(f"B{b}_T32768", "w1") >= 0.98 for b in (2, 4, 7))
print("w1" if w1 else "b1" if r("B1_T131072", "b1") >= 1.03 else "none")
PY
)
PATCH=
[ "$PICK" = w1 ] && [ "$(passed gate_w1)" = 1 ] && PATCH=scripts/patches/step45c.patch
[ -z "$PATCH" ] && [ "$(passed gate_b1)" = 1 ] && { [ "$PICK" = b1 ] || [ "$PICK" = w1 ]; } && \
  python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['B1_T131072']['times']; sys.exit(d['ours']['median_us']/d['b1']['median_us'] < 1.03)" "$L/probe.json" && PATCH=scripts/patches/step45b.patch
echo "timing pick: $PICK; patch: ${PATCH:-none}" | tee -a "$L/summary.txt"
LAND_BY=330 MT=150 BENCH_BY=470
[ "${SHORT:-0}" = 1 ] && { LAND_BY=200 MT=110 BENCH_BY=290; }
if [ -n "$PATCH" ] && [ "$SECONDS" -lt $LAND_BY ]; then
  { git apply "$PATCH" || patch -p1 < "$PATCH"; } && echo "landed on the device's tree: $PATCH" | tee -a "$L/summary.txt"
  R="--device cuda --examples 20 --no-failures"
  MSEEDS="94 95"; [ "${SHORT:-0}" = 1 ] && MSEEDS=94
  for s in $MSEEDS; do
    step matrix_s$s $MT python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
        --check mla.graph_replay --seed $s &
    step matrix_2_s$s $MT python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths --seed $s &
  done
  step testsl $MT python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge.py tests/test_mla_heads64.py &
  step zoo $MT python3 -m gate.cli zoo --device cuda --mutant mla_combine_drops_last_split \
      --mutant mla_split_empty_lse_zero --mutant mla_online_softmax_no_rescale --mutant mla_prefetch_skips_a_block &
  wait
  [ "$SECONDS" -lt $BENCH_BY ] && step bench_mla 30 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
  [ "$SECONDS" -lt 470 ] && [ "${SHORT:-0}" != 1 ] && step replay 45 python3 scripts/profile_replay.py --kinds dsa-full+sparse \
      --peer impl.candidates.mla_splits_16:Candidate --repeats 5 --json "$L/replay.json"
fi
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log; do echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; grep -E "REGRESSION|FAIL|regression" "$f" | head -3 | cut -c1-220; done
for f in "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/tests*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(tail -1 "$f" | cut -c1-200)"; done
[ -f "$L/zoo.log" ] && grep -E "caught|escaped|not run|error" "$L/zoo.log" | cut -c1-100 | tail -5
[ -f "$L/probe.log" ] && grep -vE "Warn|warn|rel-L2" "$L/probe.log" | cut -c1-400
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -9 | cut -c1-200
[ -f "$L/replay.log" ] && grep -E "^copy|^===|bytes floor|compare|mla_" "$L/replay.log" | cut -c1-200
true
