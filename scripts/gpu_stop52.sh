#!/usr/bin/env bash
# Stop 52's GPU call: issue 14 step 49 (the producer warp group, impl.candidates.mla_producer) first, then step 48's
# chain probe, then steps 46 and 47 as gpu_stop49b.sh's LEAN=1 (b1 left out: its mla.batch regression is expected).
#  check_ws  scripts/mla_producer_probe.py --check under 90 s (a hang in the mbarrier ring ends here): the Gluon
#            kernel against torch at B = 8 and 128 with -1 entries and a short row; nothing else of step 49 runs
#            unless it passed
#  probe_ws  ours against the candidate, the kernel alone and the whole decode, B = 8-256 at 32K, uncontended
#  chain     scripts/mla_chain_probe.py (step 48): ours' kernel on random / address-ordered / L2-resident rows
#  gates     side by side, 20 examples a check, against ours: step 49 at seeds 92 and 93 (mla.absorbed, batch,
#            paths, graph_replay; mla.causal at 92); step 46 and step 47 at seed 92 (as LEAN); tests46
#  probes    step 46's merge form and step 47's rows, uncontended; then their landing rules (docs/optimization_log.md
#            "Step 46", "Step 47") and, if one landed and time is left, ours' GPU matrix at seed 94, the GPU tests
#            and the cuda zoo on the split-path mutants. Step 49 lands nothing here: its verdict and numbers first.
#   OUT=/tmp/out bash scripts/gpu_stop52.sh      (~480 s)
set -u
NAME=${NAME:-stop52}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
python3 -c "import triton; print('triton', triton.__version__)" | tee -a "$L/summary.txt"
step check_ws 90 python3 scripts/mla_producer_probe.py --check
WS=0; grep -q "exit 0" <(grep "== check_ws" "$L/summary.txt") && WS=1
echo "step 49 check passed: $WS" | tee -a "$L/summary.txt"
[ "$WS" = 1 ] && step probe_ws 120 python3 scripts/mla_producer_probe.py --json "$L/probe_ws.json"
step chain 60 python3 scripts/mla_chain_probe.py --json "$L/chain.json"
G="--device cuda --baseline triton --examples 20 --no-failures"
if [ "$WS" = 1 ]; then
  for s in 92 93; do
    step gate_ws_s$s 200 python3 -m gate.cli gate $G --candidate impl.candidates.mla_producer:Candidate \
        --check mla.absorbed --check mla.batch --check mla.paths --check mla.graph_replay --seed $s &
  done
  step gate_ws_2_s92 200 python3 -m gate.cli gate $G --candidate impl.candidates.mla_producer:Candidate \
      --check mla.causal --seed 92 &
fi
step gate_46_s92 200 python3 -m gate.cli gate $G --candidate impl.candidates.mla_merge_one_round:Candidate \
    --check mla.absorbed --check mla.batch --check mla.paths --seed 92 &
step gate_47_s92 200 python3 -m gate.cli gate $G --candidate impl.candidates.mla_rows64_7:Candidate \
    --check mla.absorbed --check mla.batch --check mla.paths --check mla.graph_replay --seed 92 &
step tests46 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge.py -k one_round &
wait
T46=0; tail -1 "$L/tests46.log" | grep -qE "[0-9]+ passed" && ! tail -1 "$L/tests46.log" | grep -qE "failed|error" && T46=1
echo "gate 49 all passed: $(passed gate_ws); gate 46 passed: $(passed gate_46); tests46: $T46; gate 47 passed: $(passed gate_47)" \
    | tee -a "$L/summary.txt"
[ "$SECONDS" -lt 420 ] && step probe 80 python3 scripts/mla_b1_merge_probe.py --forms one --json "$L/probe.json"
[ "$SECONDS" -lt 470 ] && step probe47 70 python3 scripts/mla_rows64_probe.py --json "$L/probe47.json"
S47=$(python3 - "$L/probe47.json" <<'PY' 2>/dev/null || echo 0
import json, sys
d = json.load(open(sys.argv[1]))
r = lambda k: d[k]["times"]["ours"]["median_us"] / d[k]["times"]["r7"]["median_us"]
print(int(r("B7_T32768") >= 1.1 and all(r(k) >= 0.99 for k in d)))
PY
)
[ "$(passed gate_47)" = 1 ] || S47=0
S46=$(python3 - "$L/probe.json" <<'PY' 2>/dev/null || echo 0
import json, sys
d = json.load(open(sys.argv[1]))
print(int(all(d[k]["times"]["ours"]["median_us"] / d[k]["times"]["one"]["median_us"] >= 0.99 for k in d)))
PY
)
{ [ "$(passed gate_46)" = 1 ] && [ "$T46" = 1 ]; } || S46=0
echo "step 46 lands: $S46; step 47 lands: $S47" | tee -a "$L/summary.txt"
if { [ "$S46" = 1 ] || [ "$S47" = 1 ]; } && [ "$SECONDS" -lt 470 ]; then
  [ "$S46" = 1 ] && git apply scripts/patches/step46.patch && echo "landed on the device's tree: step46.patch" | tee -a "$L/summary.txt"
  [ "$S47" = 1 ] && git apply scripts/patches/step47.patch && echo "landed on the device's tree: step47.patch" | tee -a "$L/summary.txt"
  R="--device cuda --examples 20 --no-failures"
  step matrix_s94 110 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
      --check mla.graph_replay --seed 94 &
  step matrix_2_s94 110 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths --seed 94 &
  step testsl 110 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge.py tests/test_mla_heads64.py &
  step zoo 110 python3 -m gate.cli zoo --device cuda --mutant mla_combine_drops_last_split \
      --mutant mla_split_empty_lse_zero --mutant mla_online_softmax_no_rescale --mutant mla_prefetch_skips_a_block &
  wait
fi
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/gate*.log; do grep -E "REGRESSION|FAIL" "$f" | head -3 | cut -c1-220; done
for f in "$L"/tests*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(tail -1 "$f" | cut -c1-200)"; done
[ -f "$L/zoo.log" ] && grep -E "caught|escaped|not run|error" "$L/zoo.log" | cut -c1-100 | tail -5
grep -E "check|Error|error" "$L/check_ws.log" | tail -8 | cut -c1-300
[ -f "$L/probe_ws.log" ] && grep -E "us \[|launched|rel-L2" "$L/probe_ws.log" | cut -c1-220
[ -f "$L/chain.log" ] && grep -E "rel-L2|us \[" "$L/chain.log" | cut -c1-200
[ -f "$L/probe.log" ] && grep -vE "Warn|warn|rel-L2" "$L/probe.log" | cut -c1-300
[ -f "$L/probe47.log" ] && grep -vE "Warn|warn|rel-L2|launches" "$L/probe47.log" | cut -c1-300
true
