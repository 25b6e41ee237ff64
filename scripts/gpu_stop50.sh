#!/usr/bin/env bash
# STALE since stop 52: step 47 landed and step 46 was refuted (gpu_stop52.sh); their patches are gone, so this
# script's landing steps fail. Kept as the record of what stops 49-51 prepared.
# The last-budget call (~250 s of device time left): issue 14 step 47, and step 46 unless NO46=1.
#  probe47  scripts/mla_rows64_probe.py first, uncontended (ours, r7 = impl.candidates.mla_rows64_7, r5, r4; B = 4-8)
#  gate_47  ours vs the candidate at seeds 92 and 93 side by side (mla.absorbed, batch, paths, graph_replay;
#           20 examples a check): the landing rule of docs/optimization_log.md "Step 47"
#  step 46  (added in stop 51, the budget's last call) its probe forms (scripts/mla_b1_merge_probe.py --forms one,
#           uncontended), its gate at seed 92 (mla.absorbed, batch, paths) and its bitwise GPU tests, beside step 47's
#           gates; NO46=1 leaves it out
#   OUT=/tmp/out bash scripts/gpu_stop50.sh
set -u
NAME=${NAME:-stop50}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
step probe47 60 python3 scripts/mla_rows64_probe.py --json "$L/probe47.json"
[ "${NO46:-0}" = 1 ] || step probe 80 python3 scripts/mla_b1_merge_probe.py --forms one --json "$L/probe.json"
G="--device cuda --baseline triton --examples 20 --no-failures"
for s in 92 93; do
  step gate_47_s$s 150 python3 -m gate.cli gate $G --candidate impl.candidates.mla_rows64_7:Candidate \
      --check mla.absorbed --check mla.batch --check mla.paths --check mla.graph_replay --seed $s &
done
if [ "${NO46:-0}" != 1 ]; then
  step gate_46_s92 150 python3 -m gate.cli gate $G --candidate impl.candidates.mla_merge_one_round:Candidate \
      --check mla.absorbed --check mla.batch --check mla.paths --seed 92 &
  step tests46 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge.py -k one_round &
fi
wait
echo "gate 47 all passed: $(passed gate_47)" | tee -a "$L/summary.txt"
[ "${NO46:-0}" = 1 ] || echo "gate 46 passed: $(passed gate_46)" | tee -a "$L/summary.txt"
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log; do echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; grep -E "REGRESSION|FAIL" "$f" | head -3 | cut -c1-220; done
grep -vE "Warn|warn|rel-L2" "$L/probe47.log" | cut -c1-300
[ -f "$L/probe.log" ] && grep -vE "Warn|warn|rel-L2" "$L/probe.log" | cut -c1-300
[ -f "$L/tests46.log" ] && echo "tests46: $(tail -1 "$L/tests46.log" | cut -c1-200)"
true
