#!/usr/bin/env bash
# Stop 34 on the H200: the bf16-persisted continuation judged as a decision-conditioned path and its
# quantization gate on the tokens before each row's first decision flip (invariants/model_handoff.py).
#  repro    the case that false-alarmed on the H200 in stop 33 (a DSA pool flipped at a near-tie), ours and
#           the torch baseline
#  paths    glmgate run --check model.paths on cuda (bf16), ours, $EX examples at each of $SEEDS
#  zoo      the model.paths mutants on cuda, the new bf16-format one included
#  kl       the worst continuation verdicts over 40 drawn cases (scripts/measure_handoff_kl.py)
#   OUT=/tmp/out PARTS="repro paths zoo kl" SEEDS="0 1 2" bash scripts/gpu_stop34.sh
set -u
NAME=stop34
PARTS=${PARTS:-repro paths zoo kl}
source "$(dirname "$0")/gpu_steps.sh"
CASE='"case":{"type":"ModelCase","base":"tiny","layers":5,"model_seed":1,"batch":2,"length":21,"left_pad":[0,3],"splits":[21],"decode_steps":1,"seed":11229}'
for impl in triton torch; do
  has repro && step "repro_$impl" 120 python3 -m gate.cli repro \
      "{\"check\":\"model.paths\",\"impl\":\"$impl\",\"device\":\"cuda\",\"dtype\":\"bfloat16\",$CASE}"
done
for seed in $SEEDS; do
  has paths && step "paths_s$seed" "${T_PATHS:-200}" python3 -m gate.cli run --device cuda --check model.paths \
      --examples "${EX:-40}" --seed "$seed" --no-failures --json "$L/paths_s$seed.json"
done
ZOO_MUTANTS=${ZOO_MUTANTS:-model_restore_bf16_format_transposed model_restore_bf16_recurrent model_restore_transposed_kda_state}
has zoo && step zoo "${T_ZOO:-240}" python3 -m gate.cli zoo --device cuda $(printf -- "--mutant %s " $ZOO_MUTANTS)
has kl && step kl 240 python3 scripts/measure_handoff_kl.py cuda bfloat16 triton 40
echo "=== summary"; cat "$L/summary.txt"
has repro && { echo "=== repro"; for f in "$L"/repro_*.log; do echo "$f"; grep -E "FAIL|quantization|bfloat16.logits|legal" "$f" | cut -c1-220 | head -8; tail -2 "$f"; done; }
has paths && { echo "=== paths"; for f in "$L"/paths_s*.log; do tail -4 "$f" | cut -c1-200; done; }
has zoo && { echo "=== zoo"; grep -E "^│ [a-z]|caught|escaped" "$L/zoo.log" | cut -c1-100 | head; }
has kl && { echo "=== kl"; cat "$L/kl.log" | cut -c1-300; }
true
