#!/usr/bin/env bash
# Issue 14 step 16 on the H200 (docs/optimization_log.md): the KDA decode with a head's value blocks split
# over programs while B·H < 2 · SMs (impl.candidates.kda_decode_split) gated and timed against ours (one
# program a head). If it holds and gains: ours takes vs="auto" as its default (impl.kda.decode).
#  tests    tests/test_kda_decode_split.py and the KDA GPU tests (every split the bits of one program a head)
#  zoo      the first-arrival mutant, planted on the GPU (a real race there, not only the interpreter's order)
#  gate     glmgate gate, the candidate against ours, at each of $SEEDS (kda.decode, kda.paths,
#           kda.sublayer, kda.batch: the bitwise batch invariance both claim for decode)
#  bench    gate.bench_kda decode against fla-core 0.6.0 at B = 1 / 16 / 64 / 256 with the split sweep (vs="auto"
#           is the candidate's launch; needs the
#           fla-core wheel in .whl/: python3 -m pip download --no-deps --only-binary=:all: -d .whl fla-core==0.6.0)
#   OUT=/tmp/out PARTS="tests zoo gate bench" SEEDS=0 bash scripts/gpu_issue14_step16.sh
set -u
NAME=step16
PARTS=${PARTS:-tests zoo gate bench}
source "$(dirname "$0")/gpu_steps.sh"
CAND=impl.candidates.kda_decode_split:Candidate
has tests && step tests 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_decode_split.py \
    tests/test_kda_gpu.py
has zoo && step zoo 120 python3 -m gate.cli zoo --device cuda --mutant kda_decode_first_arrival_writes_window
for seed in $SEEDS; do
  has gate && step "gate_s$seed" "${T_GATE:-250}" python3 -m gate.cli gate --device cuda --candidate "$CAND" \
      --baseline triton --check kda.decode --check kda.paths --check kda.sublayer --check kda.batch \
      --examples "${EX:-20}" --seed "$seed" --json "$L/gate_s$seed.json"
done
has bench && step bench "${T_BENCH:-200}" python3 -m gate.bench_kda --skip-prefill --sweep \
    --batches "${BATCHES:-1,16,64,256}" --json "$L/bench.json"
echo "=== summary"; cat "$L/summary.txt"
has tests && { echo "=== tests"; tail -3 "$L/tests.log"; }
has zoo && { echo "=== zoo"; grep -E "^│ [a-z]" "$L/zoo.log" | cut -c1-80; }
has gate && { echo "=== gate"; for f in "$L"/gate_s*.log; do tail -9 "$f" | cut -c1-200; done; }
has bench && { echo "=== bench"; sed -n '/^decode/,$p' "$L/bench.log" | cut -c1-220; }
true
