#!/usr/bin/env bash
# The call after gpu_stop55.sh, ONLY if step 52 landed there and step 53's rule held on its output
# (docs/optimization_log.md "Step 53": gate at seeds 101 / 102 and mla.causal passed, the GPU tests passed, its four
# mutants caught, the ksplit kernel >= 1.05x `ahead` at B = 128 and >= 0.99x at every B, kernel and decode).
# Lands step 53 on the device's tree (scripts/patches/step52.patch, then step53.patch: PRODUCER_AHEAD and
# PRODUCER_KSPLIT True) and checks the landed tree: ours' GPU matrix at seeds 103 and 104 (mla checks; mla.paths,
# causal, model.paths), the MLA GPU tests, the cuda zoo on every producer mutant (each through the namespace that runs
# its code) and the Triton kernel's four split-path mutants, then the bench. Step 53 is committed only if all pass.
#   OUT=/tmp/out bash scripts/gpu_stop55b.sh      (~330 s)
set -u
NAME=${NAME:-stop55b}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=2
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
git apply scripts/patches/step52.patch && git apply scripts/patches/step53.patch \
    && echo "landed on the device's tree: step52.patch, step53.patch" | tee -a "$L/summary.txt"
R="--device cuda --examples 20 --no-failures"
for s in 103 104; do
  step matrix_s$s 170 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
      --check mla.graph_replay --seed $s &
  step matrix_2_s$s 170 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check model.paths --seed $s &
done
step tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_producer.py tests/test_mla_heads64.py \
    tests/test_mla_merge.py &
# the 12 producer mutants and the Triton kernel's 4 in four parallel zoos of 4 (~35 s a mutant)
python3 -m gate.cli zoo --list 2>/dev/null | awk '/^mla_producer_/ {print $1}' > "$L/mutants.txt"
printf "%s\n" mla_combine_drops_last_split mla_split_empty_lse_zero mla_online_softmax_no_rescale \
    mla_prefetch_skips_a_block >> "$L/mutants.txt"
for k in 0 1 2 3; do
  Z=$(awk -v k=$k 'NR % 4 == k {printf " --mutant %s", $1}' "$L/mutants.txt")
  step zoo_$k 240 python3 -m gate.cli zoo --device cuda $Z &
done
wait
[ "$SECONDS" -lt 520 ] && step bench_mla 40 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
echo "=== summary"; cat "$L/summary.txt"
for f in "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
for f in "$L"/matrix*.log; do [ -f "$f" ] && grep -E "FAIL|rror" "$f" | head -3 | cut -c1-220; done
echo "tests: $(tail -1 "$L/tests.log" | cut -c1-200)"
cat "$L"/zoo_*.log | grep -E "^│ [a-z]" | cut -c1-90
echo "mutants caught: $(cat "$L"/zoo_*.log | grep -cE "^│ [a-z_0-9]+ +│ caught") of $(wc -l < "$L/mutants.txt")"
[ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -10 | cut -c1-200
true
