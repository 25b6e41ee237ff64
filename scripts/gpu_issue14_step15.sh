#!/usr/bin/env bash
# Issue 14 step 15 on the H200 (docs/optimization_log.md): the DSA pooled-key cache (ours: each decode step
# appends the pool it completes and reads every pool's key back) gated and timed against the indexer that
# pools the whole cache again every step (impl.candidates.dsa_repool: our `index`, same cache kept).
#  tests    tests/test_dsa_pooled.py on the GPU (the append, the read, bitwise against pooling whole)
#  zoo      the pooled-cache mutants, planted on the GPU
#  gate     glmgate gate, ours against the re-pooling peer, at each of $SEEDS (dsa.pooled with its full-size
#           pins, mla.paths, model.paths)
#  replay   the dsa-full+sparse decode step from one CUDA graph at $CONTEXTS tokens, ours against the peer,
#           5 runs each (the pooling's share is what grows with the context). The 131072-token context is
#           prefilled in one call first: the indexer's [S, P] scores alone are ~17 GB (the absorbed queries
#           as much), inside the H200's memory; 240 s a context
#  matrix   the dsa and mla checks on cuda at each of $SEEDS, 20 examples
#   OUT=/tmp/out PARTS="tests zoo gate" SEEDS=0 bash scripts/gpu_issue14_step15.sh
#   OUT=/tmp/out PARTS="replay matrix" SEEDS=1 bash scripts/gpu_issue14_step15.sh
set -u
NAME=step15
PARTS=${PARTS:-tests zoo gate replay}
CONTEXTS=${CONTEXTS:-4096 32768 131072}
source "$(dirname "$0")/gpu_steps.sh"
PEER=impl.candidates.dsa_repool:Candidate
has tests && step tests 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_dsa_pooled.py tests/test_dsa_pool.py
has zoo && step zoo 150 python3 -m gate.cli zoo --device cuda --mutant dsa_pooled_append_skips_first_new_row \
    --mutant dsa_pooled_append_no_ape --mutant dsa_pooled_append_at_call_rows --mutant dsa_pooled_read_at_first_member
for seed in $SEEDS; do
  has gate && step "gate_s$seed" "${T_GATE:-300}" python3 -m gate.cli gate --device cuda --candidate triton \
      --baseline "$PEER" --check dsa.pooled --check mla.paths --check model.paths \
      --examples "${EX:-20}" --seed "$seed" --json "$L/gate_s$seed.json"
done
for ctx in $CONTEXTS; do
  has replay && step "replay_$ctx" "${T_REPLAY:-240}" python3 scripts/profile_replay.py --kinds dsa-full+sparse \
      --context "$ctx" --peer "$PEER" --repeats 5 --json "$L/replay_$ctx.json"
done
for seed in $SEEDS; do
  has matrix && step "matrix_s$seed" 250 python3 -m gate.cli run --device cuda --mechanism dsa,mla \
      --examples 20 --seed "$seed" --json "$L/matrix_s$seed.json"
done
echo "=== summary"; cat "$L/summary.txt"
has tests && { echo "=== tests"; tail -3 "$L/tests.log"; }
has zoo && { echo "=== zoo"; grep -E "^│ [a-z]" "$L/zoo.log" | cut -c1-80; }
has gate && { echo "=== gate"; for f in "$L"/gate_s*.log; do tail -9 "$f" | cut -c1-200; done; }
has replay && { echo "=== replay"; for f in "$L"/replay_*.log; do echo "$f"; grep "^===\|compare\|dsa_pool\|Cat\|cat" "$f" | cut -c1-160; done; }
has matrix && { echo "=== matrix"; grep -h "checks:" "$L"/matrix_s*.log | cut -c1-200; }
true
