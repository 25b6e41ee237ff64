#!/usr/bin/env bash
# STALE since stop 52: step 47 landed and step 46 was refuted (gpu_stop52.sh); their patches are gone, so this
# script's landing steps fail. Kept as the record of what stops 49-51 prepared.
# The next GPU call after stop 49 (it never started in stop 49: five refused starts after the first call). Verdicts first, then timing:
#  gates    side by side, 20 examples a check, against ours, at seeds 92 and 93 (SHORT=1: 92 only):
#           b1 (impl.candidates.mla_splits_b1: step 45's one-block splits at one query row only): mla.absorbed +
#           mla.batch; mla.absorbed_paged + mla.graph_replay + mla.paths + mla.causal;
#           step 46 (impl.candidates.mla_merge_one_round: the merge in one round of loads): mla.absorbed + mla.batch +
#           mla.paths; and its GPU tests (tests/test_mla_merge.py -k one_round: bitwise ours in bf16)
#  probe    alone: scripts/mla_b1_merge_probe.py (ours, w, w1, b1, one, w1_one, w1's merge tile at 4096 and 16384;
#           B = 1, 2, 4, 7, 8, 32). w1 (one pipeline stage) is no longer gated: the static compile refuted its
#           premise (docs/optimization_log.md, step 45); the probe times it as a check of that reading
#  land     by the rule written before the run (docs/optimization_log.md "Step 46"): b1 if its gate passed and it is
#           >= 1.03x ours at B = 1 (128K); step 46 if its gate and its GPU tests passed and it is >= 0.99x ours at
#           every probed shape; both: scripts/patches/step45b_46.patch, one: step45b.patch or step46.patch. Then
#           ours' GPU matrix at seeds 94 and 95 (SHORT: 94; the six mla checks and model.paths, 20 examples),
#           test_mla_merge's and test_mla_heads64's GPU tests, the cuda zoo on the four split-path kernel mutants;
#           alone glmgate bench --mechanism mla and the dsa-full+sparse replay against ours before
#  step 47  (added in stop 50) impl.candidates.mla_rows64_7 (the 64-head launch from 7 query rows, not 8): gated
#           on mla.absorbed, batch, paths, graph_replay at the same seeds; probed alone (scripts/mla_rows64_probe.py,
#           B = 4-8, with ROWS_64 = 4 and 5 ungated); lands (scripts/patches/step47.patch, after the b1 / 46 patch
#           if one lands: they compose) if its gate passed, it is >= 1.1x ours at B = 7 and >= 0.99x at every B
#  step 48  (added in stop 51) scripts/mla_chain_probe.py if time is left: ours' kernel at B = 32 and 128 on random,
#           address-ordered and L2-resident rows (how much of the gap to the bytes floor is the gather's latency)
#  LEAN=1   (a low device budget) SHORT without b1: step 46 and step 47 gated at seed 92, the probes, the landing
#   OUT=/tmp/out bash scripts/gpu_stop49b.sh     (the patches are tracked: nothing to carry; ~500 s, SHORT=1 ~350 s, LEAN=1 ~300 s)
set -u
NAME=${NAME:-stop49b}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
G="--device cuda --baseline triton --examples 20 --no-failures"
[ "${LEAN:-0}" = 1 ] && SHORT=1
SEEDS="92 93"; [ "${SHORT:-0}" = 1 ] && SEEDS=92
for s in $SEEDS; do
  C="--candidate impl.candidates.mla_splits_b1:Candidate"
  [ "${LEAN:-0}" != 1 ] && step gate_b1_s$s 240 python3 -m gate.cli gate $G $C --check mla.absorbed --check mla.batch --seed $s &
  [ "${LEAN:-0}" != 1 ] && step gate_b1_2_s$s 240 python3 -m gate.cli gate $G $C --check mla.absorbed_paged --check mla.graph_replay \
      --check mla.paths --check mla.causal --seed $s &
  step gate_46_s$s 240 python3 -m gate.cli gate $G --candidate impl.candidates.mla_merge_one_round:Candidate \
      --check mla.absorbed --check mla.batch --check mla.paths --seed $s &
  step gate_47_s$s 240 python3 -m gate.cli gate $G --candidate impl.candidates.mla_rows64_7:Candidate \
      --check mla.absorbed --check mla.batch --check mla.paths --check mla.graph_replay --seed $s &
done
step tests46 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge.py -k one_round &
wait
T46=0; tail -1 "$L/tests46.log" | grep -qE "[0-9]+ passed" && ! tail -1 "$L/tests46.log" | grep -qE "failed|error" && T46=1
echo "gate b1 all passed: $(passed gate_b1); gate 46 all passed: $(passed gate_46); tests46 passed: $T46" | tee -a "$L/summary.txt"
PF=; [ "${SHORT:-0}" = 1 ] && PF="--forms b1,one"   # SHORT: only the forms the landing rule reads
[ "${LEAN:-0}" = 1 ] && PF="--forms one"            # LEAN: b1 neither gated nor timed (it cannot land)
[ "$SECONDS" -lt 300 ] && step probe 150 python3 scripts/mla_b1_merge_probe.py $PF --json "$L/probe.json"
[ "$SECONDS" -lt 380 ] && step probe47 90 python3 scripts/mla_rows64_probe.py --json "$L/probe47.json"
S47=$(python3 - "$L/probe47.json" <<'PY' 2>/dev/null || echo 0
import json, sys
d = json.load(open(sys.argv[1]))
r = lambda k: d[k]["times"]["ours"]["median_us"] / d[k]["times"]["r7"]["median_us"]
print(int(r("B7_T32768") >= 1.1 and all(r(k) >= 0.99 for k in d)))
PY
)
[ "$(passed gate_47)" = 1 ] || S47=0
echo "step 47 (ROWS_64 = 7) lands: $S47" | tee -a "$L/summary.txt"
read -r B1 S46 <<< "$(python3 - "$L/probe.json" <<'PY' 2>/dev/null || echo "0 0"
import json, sys
d = json.load(open(sys.argv[1]))
r = lambda k, f: d[k]["times"]["ours"]["median_us"] / d[k]["times"][f]["median_us"]
print(int("b1" in d["B1_T131072"]["times"] and r("B1_T131072", "b1") >= 1.03), int(all(r(k, "one") >= 0.99 for k in d)))
PY
)"
[ "$(passed gate_b1)" = 1 ] || B1=0   # LEAN: no gate_b1 log, so not passed
{ [ "$(passed gate_46)" = 1 ] && [ "$T46" = 1 ]; } || S46=0
PATCH= PEER=
[ "$B1$S46" = 11 ] && PATCH=scripts/patches/step45b_46.patch PEER=impl.candidates.mla_splits_16:Candidate
[ "$B1$S46" = 10 ] && PATCH=scripts/patches/step45b.patch PEER=impl.candidates.mla_splits_16:Candidate
[ "$B1$S46" = 01 ] && PATCH=scripts/patches/step46.patch PEER=impl.candidates.mla_merge_two_rounds:Candidate
echo "b1 lands: $B1; step 46 lands: $S46; patch: ${PATCH:-none}" | tee -a "$L/summary.txt"
LAND_BY=400 MT=130 BENCH_BY=520
[ "${SHORT:-0}" = 1 ] && { LAND_BY=300 MT=110 BENCH_BY=420; }
if { [ -n "$PATCH" ] || [ "$S47" = 1 ]; } && [ "$SECONDS" -lt $LAND_BY ]; then
  [ -n "$PATCH" ] && git apply "$PATCH" && echo "landed on the device's tree: $PATCH" | tee -a "$L/summary.txt"
  [ "$S47" = 1 ] && git apply scripts/patches/step47.patch && \
    echo "landed on the device's tree: scripts/patches/step47.patch (impl.mla.ROWS_64 = 7)" | tee -a "$L/summary.txt"
  [ -z "$PEER" ] && PEER=impl.candidates.mla_heads64_small:Candidate
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
  [ "$SECONDS" -lt 530 ] && [ "${SHORT:-0}" != 1 ] && step replay 45 python3 scripts/profile_replay.py \
      --kinds dsa-full+sparse --peer "$PEER" --repeats 5 --json "$L/replay.json"
fi
# step 48's probe (added in stop 51; times only, lands nothing): the kernel on L2-resident rows against HBM rows
[ "$SECONDS" -lt 545 ] && step chain 45 python3 scripts/mla_chain_probe.py --json "$L/chain.json"
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/gate*.log; do grep -E "REGRESSION|FAIL" "$f" | head -3 | cut -c1-220; done
for f in "$L"/tests*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(tail -1 "$f" | cut -c1-200)"; done
[ -f "$L/zoo.log" ] && grep -E "caught|escaped|not run|error" "$L/zoo.log" | cut -c1-100 | tail -5
[ -f "$L/probe.log" ] && grep -vE "Warn|warn|rel-L2" "$L/probe.log" | cut -c1-400
[ -f "$L/probe47.log" ] && grep -vE "Warn|warn|rel-L2|launches" "$L/probe47.log" | cut -c1-300
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -9 | cut -c1-200
[ -f "$L/chain.log" ] && grep -E "rel-L2|us \[" "$L/chain.log" | cut -c1-200
[ -f "$L/replay.log" ] && grep -E "^copy|^===|bytes floor|compare|mla_" "$L/replay.log" | cut -c1-200
true
