#!/usr/bin/env bash
# RUN in stop 54 (H100): step 52 gated and measured. Kept as the record of its call.
# The second GPU call of stop 54: issue 14 step 52 (impl.candidates.mla_producer_ahead: the producer warps load each
# block's entries one block ahead) checked, gated and measured against ours (the producer kernel with step 51's blocks
# of 64 from 16 rows). Lands nothing (its mutant runs through the candidate; docs/optimization_log.md "Step 52").
#  check  scripts/mla_producer_probe.py --check ahead (an mbarrier hang or a wrong row ends the call here)
#  gates  against ours at seeds 97 and 98, 20 examples a check: mla.absorbed, batch, absorbed_paged, paths,
#         graph_replay; mla.causal at 97
#  tests  tests/test_mla_producer.py's GPU tests (the reference and the paged bits: blocks of 32, 64, and ahead)
#  zoo    mla_producer_ahead_copies_the_next_entries (through the candidate)
#  probe  chain / producer / bw64_16 (ours) / ahead: kernel and decode, B = 8-256, 5 alternating rounds
#   OUT=/tmp/out bash scripts/gpu_stop54b.sh      (~300 s)
set -u
NAME=${NAME:-stop54b}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
step check 90 python3 scripts/mla_producer_probe.py --check ahead
grep -q "exit 0" <(grep "== check" "$L/summary.txt") || { echo "=== summary"; cat "$L/summary.txt"; tail -20 "$L/check.log"; exit 0; }
G="--device cuda --baseline triton --examples 20 --no-failures --candidate impl.candidates.mla_producer_ahead:Candidate"
for s in 97 98; do
  step gate52_s$s 220 python3 -m gate.cli gate $G --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
      --check mla.paths --check mla.graph_replay --seed $s &
done
step gate52_2_s97 220 python3 -m gate.cli gate $G --check mla.causal --seed 97 &
step tests52 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_producer.py &
step zoo52 150 python3 -m gate.cli zoo --device cuda --mutant mla_producer_ahead_copies_the_next_entries &
wait
[ "$SECONDS" -lt 420 ] && step probe 60 python3 scripts/mla_producer_probe.py --forms bw64_16,ahead --json "$L/probe.json"
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/gate*.log; do [ -f "$f" ] && grep -E "REGRESSION|FAIL" "$f" | head -3 | cut -c1-220; done
for f in "$L"/tests*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(tail -1 "$f" | cut -c1-200)"; done
for f in "$L"/zoo*.log; do [ -f "$f" ] && grep -E "^│ [a-z]" "$f" | cut -c1-90; done
grep -E "check " "$L/check.log"
[ -f "$L/probe.log" ] && grep -E "us \[" "$L/probe.log" | grep -vE "overlap" | cut -c1-170
true
