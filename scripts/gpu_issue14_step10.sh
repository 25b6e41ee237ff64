#!/usr/bin/env bash
# Issue 14 step 10 on the H200 (docs/optimization_log.md): impl.dsa.select_pools is one kernel
# (dsa_select_fwd_kernel); impl.candidates.dsa_select_torch (the torch selection) is the peer it is timed beside.
#  tests   the DSA / MLA GPU tests (the compiled selection kernel against the oracle's pick, graph capture)
#  bench   scripts/dsa_select_variants.py: the kernel at each search step / warp count beside the torch form
#  replay  the dsa-full+sparse decode step from one CUDA graph, ours against the torch selection, 5 runs
#  zoo     the selection kernel's mutants and the tail one, planted on the GPU
#  gate    glmgate gate, ours against the torch selection as the baseline, at seed 0
#  matrix  the dsa and mla mechanisms on ours at each of $SEEDS (default 0 1); model.paths at seed 3
#   OUT=/tmp/out PARTS="tests bench replay zoo" bash scripts/gpu_issue14_step10.sh
# Each step's log lands in $OUT/step10/ and the folder is re-archived to $OUT/step10.tgz after every step.
set -u
NAME=step10
PARTS=${PARTS:-tests bench replay zoo gate matrix}
source "$(dirname "$0")/gpu_steps.sh"
PEER=impl.candidates.dsa_select_torch:Candidate
has tests && step tests 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_dsa_select.py \
    tests/test_dsa_pool.py tests/test_dsa_mla_kernels.py tests/test_host_sync.py tests/test_checkpoint_nvfp4.py
has bench && step bench 120 python3 scripts/dsa_select_variants.py --json "$L/bench.json"
has replay && step replay "${T_REPLAY:-90}" python3 scripts/profile_replay.py --kinds dsa-full+sparse \
    --peer "$PEER" --repeats 5 --json "$L/replay.json"
has zoo && step zoo 180 python3 -m gate.cli zoo --device cuda --mutant dsa_select_kernel_threshold16_bits \
    --mutant dsa_select_kernel_tail_over_picked_pool --mutant dsa_select_kernel_ranks_restart_per_tile \
    --mutant dsa_tail_repeats_picked_pool
has gate && step gate "${T_GATE:-240}" python3 -m gate.cli gate --device cuda --candidate triton --baseline "$PEER" \
    --check dsa.index --check dsa.rerun --check dsa.batch --check mla.paths --examples 10 --seed 0 \
    --json "$L/gate.json"
for seed in $SEEDS; do
  has matrix && step "matrix_s$seed" "${T_MATRIX:-150}" python3 -m gate.cli run --device cuda --mechanism dsa,mla \
      --examples "${EX:-20}" --seed "$seed" --json "$L/matrix_s$seed.json"
done
has matrix && step model_paths 120 python3 -m gate.cli run --device cuda --check model.paths --examples 12 --seed 3 \
    --json "$L/model_paths.json"
echo "=== summary"; cat "$L/summary.txt"
has tests && { echo "=== tests"; tail -3 "$L/tests.log"; }
has bench && { echo "=== bench"; grep "^B=" "$L/bench.log"; }
has replay && { echo "=== replay"; grep "^===\|compare\|median\|us" "$L/replay.log" | tail -12 | cut -c1-200; }
has zoo && { echo "=== zoo"; grep -E "^│ [a-z]" "$L/zoo.log" | cut -c1-80; }
has gate && { echo "=== gate"; tail -15 "$L/gate.log" | cut -c1-200; }
has matrix && { echo "=== matrix"; for f in "$L"/matrix_s*.log "$L/model_paths.log"; do grep "checks:" "$f" | cut -c1-200; done; }
