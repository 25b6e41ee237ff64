#!/usr/bin/env bash
# RAN in stop 52 (bench_results/issue14_h200_2026-12-07_stop52/stop52b); step 49 did not land. Superseded by
# gpu_stop53.sh (the paged cache in the producer, the new empty-split pin, the landing patch).
# Stop 52's second GPU call: issue 14 step 49 landed as ours (impl.mla.PRODUCER), verified on the landed tree.
#  check     scripts/mla_producer_probe.py --check (90 s: an mbarrier hang ends here)
#  matrix    ours' GPU matrix at seeds 94 and 95: the six mla checks (mla.absorbed now with its empty-split pin of 8
#            rows over 600 tokens) and model.paths, 20 examples a check
#  tests     the GPU tests of the MLA kernels; the cuda zoo on the four producer mutants and the four split-path ones
#  bench     glmgate bench --mechanism mla (the % of copy and the dense ratio), alone
#  ncu       the Triton, the producer and step 50's kernel at B = 128, warp-state stalls (where the consumer's time goes)
#  step 50   (impl.candidates.mla_producer_overlap: the next block's scores during this block's softmax) its --check
#            (90 s), its gate at seed 92 beside the matrix, and the probe (chain / producer / overlap) after the bench;
#            lands nothing in this call
#   OUT=/tmp/out bash scripts/gpu_stop52b.sh     (~340 s)
set -u
NAME=${NAME:-stop52b}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
step check 90 python3 scripts/mla_producer_probe.py --check producer
step check50 90 python3 scripts/mla_producer_probe.py --check overlap
OV=0; grep -q "exit 0" <(grep "== check50" "$L/summary.txt") && OV=1
R="--device cuda --examples 20 --no-failures"
[ "$OV" = 1 ] && step gate50_s92 200 python3 -m gate.cli gate --device cuda --baseline triton --examples 20 --no-failures \
    --candidate impl.candidates.mla_producer_overlap:Candidate --check mla.absorbed --check mla.batch --check mla.paths \
    --check mla.graph_replay --seed 92 &
for s in 94 95; do
  step matrix_s$s 150 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
      --check mla.graph_replay --seed $s &
  step matrix_2_s$s 150 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths --seed $s &
done
step tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge.py tests/test_mla_heads64.py &
step zoo 150 python3 -m gate.cli zoo --device cuda --mutant mla_producer_no_rescale --mutant mla_producer_empty_lse_zero \
    --mutant mla_producer_mask_a_block_late --mutant mla_producer_gathers_the_next_block \
    --mutant mla_combine_drops_last_split --mutant mla_split_empty_lse_zero --mutant mla_online_softmax_no_rescale \
    --mutant mla_prefetch_skips_a_block &
wait
[ "$SECONDS" -lt 280 ] && step bench_mla 40 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
[ "$OV" = 1 ] && [ "$SECONDS" -lt 320 ] && step probe 55 python3 scripts/mla_producer_probe.py --json "$L/probe.json"
command -v ncu > /dev/null && [ "$SECONDS" -lt 330 ] && step ncu 50 ncu --clock-control none \
    --kernel-name regex:mla_sparse_absorbed --launch-skip 3 --launch-count 3 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats python3 scripts/mla_ncu_one.py
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/matrix*.log; do grep -E "FAIL|error" "$f" | head -3 | cut -c1-220; done
grep -E "check " "$L/check.log" "$L/check50.log"
[ -f "$L/gate50_s92.log" ] && echo "gate50_s92: $(grep -E 'checks:' "$L/gate50_s92.log" | tail -1)" && \
    grep -E "REGRESSION|FAIL" "$L/gate50_s92.log" | head -3 | cut -c1-200
[ -f "$L/probe.log" ] && grep -E "us \[" "$L/probe.log" | cut -c1-170
echo "tests: $(tail -1 "$L/tests.log" | cut -c1-200)"
grep -E "^│ [a-z]" "$L/zoo.log" | cut -c1-80
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -14 | cut -c1-200
[ -f "$L/ncu.log" ] && grep -E "mla_sparse|Duration|Issue Slots Busy|Stall|Warp Cycles Per Issued|No Eligible|Memory Throughput|Compute \(SM\)" \
    "$L/ncu.log" | cut -c1-150 | head -50
true
