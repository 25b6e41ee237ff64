#!/usr/bin/env bash
# Step 53's code (candidate, kernel form, mutants, probe form) was removed after this run: it no longer runs as written.
# The next GPU call after stop 54 (issue 14; ~420 s): step 52's landing (it could not run in stop 54: no device time
# left) and step 53's first GPU run, in one call.
#  check53  scripts/mla_producer_probe.py --check ksplit (90 s: an mbarrier hang in the two consumer halves' exchange
#           ends here; step 53's other steps run only if it passed)
#  land 52  scripts/patches/step52.patch (impl.mla.PRODUCER_AHEAD = True) on the device's tree, by the rule in
#           docs/optimization_log.md "Step 52": ours' GPU matrix at seed 99 (mla checks; mla.paths, causal,
#           model.paths), the producer GPU tests, step 52's three mutants through ours. Lands (is committed) if all pass
#  step 53  impl.candidates.mla_producer_ksplit gated against ours (step 52 on the device's tree) at seeds 101 and 102
#           (mla.absorbed, batch, absorbed_paged, paths, graph_replay; mla.causal at 101); its mutant; then the probe
#           (chain / producer / bw64_16 / ahead / ksplit, B = 8-256, 5 alternating rounds) and Nsight's stall reasons
#           of the three producer kernels at B = 128. Lands nothing: its four mutants (the dropped half and the three
#           consumer twins) run here through the candidate; if the log's "Step 53" rule holds on this call's output,
#           scripts/gpu_stop55b.sh lands it (with step 52, which it needs) and checks the landed tree
#   OUT=/tmp/out bash scripts/gpu_stop55.sh
set -u
NAME=${NAME:-stop55}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
python3 -c "import triton; print('triton', triton.__version__)" | tee -a "$L/summary.txt"
step check53 90 python3 scripts/mla_producer_probe.py --check ksplit
K=0; grep -q "exit 0" <(grep "== check53" "$L/summary.txt") && K=1
echo "step 53 check passed: $K" | tee -a "$L/summary.txt"
git apply scripts/patches/step52.patch && echo "applied on the device's tree: step52.patch" | tee -a "$L/summary.txt"
R="--device cuda --examples 20 --no-failures"
step matrix_s99 150 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
    --check mla.graph_replay --seed 99 &
step matrix_2_s99 150 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths --seed 99 &
step tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_producer.py tests/test_mla_heads64.py &
step zoo52 200 python3 -m gate.cli zoo --device cuda --mutant mla_producer_ahead_copies_the_next_entries \
    --mutant mla_producer_ahead_prefetches_two_ahead --mutant mla_producer_ahead_second_half_over_the_first &
[ "$K" = 1 ] && step zoo53 220 python3 -m gate.cli zoo --device cuda --mutant mla_producer_ksplit_drops_the_other_half \
    --mutant mla_producer_ksplit_no_rescale --mutant mla_producer_ksplit_empty_lse_zero \
    --mutant mla_producer_ksplit_mask_a_block_late &
if [ "$K" = 1 ]; then
  G="--device cuda --baseline triton --examples 20 --no-failures --candidate impl.candidates.mla_producer_ksplit:Candidate"
  for s in 101 102; do
    step gate53_s$s 220 python3 -m gate.cli gate $G --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
        --check mla.paths --check mla.graph_replay --seed $s &
  done
  step gate53_2_s101 220 python3 -m gate.cli gate $G --check mla.causal --seed 101 &
fi
wait
TW=0; tail -1 "$L/tests.log" | grep -qE "[0-9]+ passed" && ! tail -1 "$L/tests.log" | grep -qE "failed|error" && TW=1
ZA=$(grep -cE "^│ mla_producer_ahead_[a-z_]+ +│ caught" "$L/zoo52.log")
M=1; for f in "$L"/matrix*.log; do grep -qs " 0 failed, 0 errors, 0 not covered, 0 not run" "$f" || M=0; done
ZK=$(grep -csE "^│ mla_producer_ksplit_[a-z_]+ +│ caught" "$L/zoo53.log")
echo "step 53: check $K; gates passed $(passed gate53); its mutants caught $ZK of 4" | tee -a "$L/summary.txt"
echo "step 52: matrix passed $M; tests $TW; its mutants caught $ZA of 3; lands: $([ $M = 1 ] && [ $TW = 1 ] && [ $ZA = 3 ] && echo 1 || echo 0)" \
    | tee -a "$L/summary.txt"
PF=bw64_16,ahead; [ "$K" = 1 ] && PF=$PF,ksplit
[ "$SECONDS" -lt 470 ] && step probe 60 python3 scripts/mla_producer_probe.py --forms $PF --json "$L/probe.json"
NK=""; [ "$K" = 1 ] && NK="--ksplit"; NC=2; [ "$K" = 1 ] && NC=3
command -v ncu > /dev/null && [ "$SECONDS" -lt 530 ] && step ncu_stall 50 ncu --clock-control none \
    --kernel-name regex:mla_sparse_absorbed_ws --launch-skip $NC --launch-count $NC --metrics \
    regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum \
    python3 scripts/mla_ncu_producer.py $NK
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && grep -E "REGRESSION|FAIL" "$f" | head -3 | cut -c1-220; done
echo "tests: $(tail -1 "$L/tests.log" | cut -c1-200)"
cat "$L"/zoo5*.log | grep -E "^│ [a-z]" | cut -c1-90
grep -E "check " "$L/check53.log"
[ -f "$L/probe.log" ] && grep -E "us \[" "$L/probe.log" | cut -c1-170
[ -f "$L/ncu_stall.log" ] && grep -E "mla_sparse|stalled_(barrier|long|wait|short)|issue_active|duration" "$L/ncu_stall.log" | cut -c1-140
true
