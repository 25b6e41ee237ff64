#!/usr/bin/env bash
# NOT RUN: stop 54 had no device time left for it; scripts/gpu_stop55.sh carries its steps.
# The third GPU call of stop 54 (a low device budget: ~340 s): issue 14 step 52's landing (scripts/patches/step52.patch:
# impl.mla.PRODUCER_AHEAD = True) on the device's tree, by the rule in docs/optimization_log.md "Step 52" (written
# after stop 54b's gate and numbers, before this call): it lands (is committed) if, on the patched tree, ours' GPU
# matrix at seed 99 (the mla checks and model.paths, 20 examples), the producer GPU tests and step 52's three mutants
# (through ours) all pass / are caught.
#   OUT=/tmp/out bash scripts/gpu_stop54c.sh      (~150 s)
set -u
NAME=${NAME:-stop54c}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
git apply scripts/patches/step52.patch && echo "applied on the device's tree: step52.patch" | tee -a "$L/summary.txt"
R="--device cuda --examples 20 --no-failures"
step matrix_s99 150 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
    --check mla.graph_replay --seed 99 &
step matrix_2_s99 150 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths --seed 99 &
step tests 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_producer.py tests/test_mla_heads64.py &
step zoo 150 python3 -m gate.cli zoo --device cuda --mutant mla_producer_ahead_copies_the_next_entries \
    --mutant mla_producer_ahead_prefetches_two_ahead --mutant mla_producer_ahead_second_half_over_the_first &
wait
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/matrix*.log; do [ -f "$f" ] && grep -E "FAIL|rror" "$f" | head -3 | cut -c1-220; done
echo "tests: $(tail -1 "$L/tests.log" | cut -c1-200)"
grep -E "^│ [a-z]" "$L/zoo.log" | cut -c1-90
true
