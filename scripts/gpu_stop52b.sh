#!/usr/bin/env bash
# Stop 52's second GPU call: issue 14 step 49 landed as ours (impl.mla.PRODUCER), verified on the landed tree.
#  check     scripts/mla_producer_probe.py --check (90 s: an mbarrier hang ends here)
#  matrix    ours' GPU matrix at seeds 94 and 95: the six mla checks (mla.absorbed now with its empty-split pin of 8
#            rows over 600 tokens) and model.paths, 20 examples a check
#  tests     the GPU tests of the MLA kernels; the cuda zoo on the four producer mutants and the four split-path ones
#  bench     glmgate bench --mechanism mla (the % of copy and the dense ratio), alone
#  ncu       the Triton and the producer kernel at B = 128, warp-state stalls (where the consumer's time goes)
#   OUT=/tmp/out bash scripts/gpu_stop52b.sh     (~300 s)
set -u
NAME=${NAME:-stop52b}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
step check 90 python3 scripts/mla_producer_probe.py --check
R="--device cuda --examples 20 --no-failures"
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
[ "$SECONDS" -lt 300 ] && step bench_mla 40 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
command -v ncu > /dev/null && [ "$SECONDS" -lt 330 ] && step ncu 60 ncu --clock-control none \
    --kernel-name regex:mla_sparse_absorbed --launch-skip 2 --launch-count 2 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats python3 scripts/mla_ncu_one.py
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/matrix*.log; do grep -E "FAIL|error" "$f" | head -3 | cut -c1-220; done
grep -E "check B" "$L/check.log"
echo "tests: $(tail -1 "$L/tests.log" | cut -c1-200)"
grep -E "^│ [a-z]" "$L/zoo.log" | cut -c1-80
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -14 | cut -c1-200
[ -f "$L/ncu.log" ] && grep -E "mla_sparse|Duration|Issue Slots Busy|Stall|Warp Cycles Per Issued|No Eligible|Memory Throughput|Compute \(SM\)" \
    "$L/ncu.log" | cut -c1-150 | head -50
true
