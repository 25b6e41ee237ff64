#!/usr/bin/env bash
# Issue 14 step 9 on the H200 (docs/optimization_log.md), landed: impl.dsa.pool_keys is one kernel
# (dsa_pool_fwd_kernel); impl.candidates.dsa_pool_torch (the torch pooling) is the peer it is timed beside.
#  tests   the DSA / MLA GPU tests (the compiled pool kernel against the float64 oracle, graph capture)
#  replay  the dsa-full+sparse decode step from one CUDA graph, ours against the torch pooling, 5 runs
#  zoo     the pool kernel's mutants and the tail one, planted on the GPU
#  matrix  the dsa and mla mechanisms on ours at each of $SEEDS (default 0 1); model.paths at seed 3
#   OUT=/tmp/out PARTS="tests replay zoo matrix" bash scripts/gpu_issue14_step9.sh
# (The runs before landing, of impl.candidates.dsa_pool_fused against ours, used this script at commit
# 750832b plus the gate / replay fixes the log names.) Each step's log lands in $OUT/step9/ and the folder
# is re-archived to $OUT/step9.tgz after every step, so a call cut at its limit still returns what ran.
set -u
NAME=step9
PARTS=${PARTS:-tests replay zoo matrix}
source "$(dirname "$0")/gpu_steps.sh"
has tests && step tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_dsa_pool.py \
    tests/test_dsa_mla_kernels.py tests/test_host_sync.py
has replay && step replay "${T_REPLAY:-90}" python3 scripts/profile_replay.py --kinds dsa-full+sparse \
    --peer impl.candidates.dsa_pool_torch:Candidate --repeats 5 --json "$L/replay.json"
has zoo && step zoo 150 python3 -m gate.cli zoo --device cuda --mutant dsa_pool_kernel_no_ape \
    --mutant dsa_pool_kernel_ignores_valid_flag --mutant dsa_tail_repeats_picked_pool
for seed in $SEEDS; do
  has matrix && step "matrix_s$seed" "${T_MATRIX:-150}" python3 -m gate.cli run --device cuda --mechanism dsa,mla \
      --examples "${EX:-20}" --seed "$seed" --json "$L/matrix_s$seed.json"
done
has matrix && step model_paths 120 python3 -m gate.cli run --device cuda --check model.paths --examples 12 --seed 3 \
    --json "$L/model_paths.json"
echo "=== tests"; tail -1 "$L/tests.log"
echo "=== replay"; grep "^===\|compare" "$L/replay.log" | cut -c1-200
echo "=== zoo"; grep -E "^│ [a-z]" "$L/zoo.log" | cut -c1-80
echo "=== matrix"; for f in "$L"/matrix_s*.log "$L/model_paths.log"; do grep "checks:" "$f" | cut -c1-200; done
