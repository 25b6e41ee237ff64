#!/usr/bin/env bash
# Stop 49's second GPU call (step 45's forms after the first call's measurement; verdicts, then timing alone):
#  gates    side by side, 20 examples a check, against ours, at seeds 92 and 93: mla.absorbed + mla.batch;
#           mla.absorbed_paged + mla.graph_replay + mla.paths + mla.causal; for impl.candidates.mla_splits_w1 (the
#           one-block splits from W below 8 rows with one pipeline stage) and impl.candidates.mla_splits_b1 (the
#           one-block splits at one query row only)
#  probe    alone: scripts/mla_b1_merge_probe.py (ours, w, w1, b1, w1's merge tile at 4096 and 16384; B = 1, 2, 4, 7)
#   OUT=/tmp/out bash scripts/gpu_stop49b.sh
set -u
NAME=${NAME:-stop49b}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
G="--device cuda --baseline triton --examples 20 --no-failures"
for c in w1 b1; do
  C="--candidate impl.candidates.mla_splits_$c:Candidate"
  for s in 92 93; do
    step gate_${c}_s$s 240 python3 -m gate.cli gate $G $C --check mla.absorbed --check mla.batch --seed $s &
    step gate_${c}_2_s$s 240 python3 -m gate.cli gate $G $C --check mla.absorbed_paged --check mla.graph_replay \
        --check mla.paths --check mla.causal --seed $s &
  done
done
wait
passed() { local p=1; for f in "$L"/$1_*.log; do grep -q "0 failed, 0 regressions, 0 not covered, 0 errors, 0 not run" "$f" || p=0; done; echo $p; }
echo "gate w1 all passed: $(passed gate_w1); gate b1 all passed: $(passed gate_b1)" | tee -a "$L/summary.txt"
[ "$SECONDS" -lt 420 ] && step probe 120 python3 scripts/mla_b1_merge_probe.py --json "$L/probe.json"
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log; do echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; grep -E "REGRESSION|FAIL|regression" "$f" | head -3 | cut -c1-220; done
[ -f "$L/probe.log" ] && grep -vE "Warn|warn|rel-L2" "$L/probe.log" | cut -c1-400
true
