#!/usr/bin/env bash
# Issue 14 step 19 on the H200 (docs/optimization_log.md): the MLA / DSA caches appended in place in buffers
# with room (impl.candidates.cache_in_place) gated and timed against ours (every step copies every cache
# array: torch.cat).
#  tests    tests/test_cache_in_place.py (the CPU suite's: the tip rule, ours' bits)
#  zoo      the mutant that drops the tip rule, planted on the GPU (mla.paths' sibling continuation)
#  gate     glmgate gate, the candidate against ours, at each of $SEEDS (mla.paths, mla.causal, dsa.pooled,
#           model.paths, model.causal, serving.state_machine)
#  replay   the dsa-full+sparse decode step ($KINDS: also kda+sparse) from one CUDA graph at $CONTEXTS tokens, ours
#           against the candidate (its state moved into buffers with room and marked their tip before each
#           step: bench_state), 5 runs each; 240 s a context
#   OUT=/tmp/out PARTS="tests zoo gate replay" SEEDS=0 bash scripts/gpu_issue14_step19.sh
set -u
NAME=step19
PARTS=${PARTS:-tests zoo gate replay}
CONTEXTS=${CONTEXTS:-4096 32768 131072}
source "$(dirname "$0")/gpu_steps.sh"
CAND=impl.candidates.cache_in_place:Candidate
has tests && step tests 120 python3 -m pytest -q -p no:cacheprovider tests/test_cache_in_place.py
has zoo && step zoo 120 python3 -m gate.cli zoo --device cuda --mutant mla_cache_in_place_without_the_tip_rule
for seed in $SEEDS; do
  has gate && step "gate_s$seed" "${T_GATE:-400}" python3 -m gate.cli gate --device cuda --candidate "$CAND" \
      --baseline triton --check mla.paths --check mla.causal --check dsa.pooled --check model.paths \
      --check model.causal --check serving.state_machine --examples "${EX:-20}" --seed "$seed" \
      --json "$L/gate_s$seed.json"
done
for ctx in $CONTEXTS; do
  has replay && step "replay_$ctx" "${T_REPLAY:-240}" python3 scripts/profile_replay.py \
      --kinds "${KINDS:-dsa-full+sparse}" --context "$ctx" --peer "$CAND" --repeats 5 --json "$L/replay_$ctx.json"
done
echo "=== summary"; cat "$L/summary.txt"
has tests && { echo "=== tests"; tail -3 "$L/tests.log"; }
has zoo && { echo "=== zoo"; grep -E "^│ [a-z]" "$L/zoo.log" | cut -c1-80; }
has gate && { echo "=== gate"; for f in "$L"/gate_s*.log; do tail -12 "$f" | cut -c1-200; done; }
has replay && { echo "=== replay"; for f in "$L"/replay_*.log; do echo "$f"; grep "^===\|compare\|cat\|copy" "$f" | cut -c1-160; done; }
true
