#!/usr/bin/env bash
# Issue 14 steps 5-6 on the H200: the mHC launch form for prefill and decode.
#  (a) the variants of scripts/mhc_variants.py (rows and warps per kernel; the tl.dot partial) at 1 / 32 /
#      4096 tokens, batch invariance probed per variant
#  (b) the gate of the fastest variant that keeps decode (scripts/with_mhc_launch.py --pick, or the
#      constants in FORM="_K=V ..."): mHC and decoder checks against the one-program kernel, per seed
#  (c) with MEASURE=1, on the same form: glmgate bench --mechanism mhc (5 runs, against the one-program
#      kernel), the three layer kinds' decode replays (scripts/profile_replay.py, same peer) and the serving
#      checks on the GPU
#   OUT=/tmp/out SEEDS="0 1" EX=12 [SLACK=2] [MEASURE=1] bash scripts/gpu_issue14_step6.sh
set -u
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ -z "${FORM:-}" ]; then
  timeout "${T_VAR:-150}" python3 scripts/mhc_variants.py --tokens 1,32,4096 --repeats 3 --json "$OUT/variants.json" \
      > "$OUT/variants.log" 2>&1; echo "== variants: exit $?" >> "$OUT/summary.txt"
  FORM_ARGS="--pick $OUT/variants.json:${SLACK:-1}"
else
  FORM_ARGS=$FORM
fi
for seed in ${SEEDS:-0 1}; do
  timeout "${T:-190}" python3 scripts/with_mhc_launch.py $FORM_ARGS -- gate --device cuda --candidate triton \
      --baseline impl.candidates.mhc_one_program:Candidate --check mhc.coefficients --check mhc.write_back \
      --check mhc.batch --check mhc.rerun --check model.paths --check model.causal --examples "${EX:-12}" \
      --seed "$seed" --json "$OUT/gate_s$seed.json" > "$OUT/gate_s$seed.log" 2>&1
  echo "== gate seed $seed: exit $?" >> "$OUT/summary.txt"
done
if [ -n "${MEASURE:-}" ]; then
  W="python3 scripts/with_mhc_launch.py $FORM_ARGS --"
  timeout "${T_BENCH:-120}" $W bench --mechanism mhc -- --json "$OUT/bench_mhc.json" > "$OUT/bench_mhc.log" 2>&1
  echo "== bench mhc: exit $?" >> "$OUT/summary.txt"
  timeout "${T_REPLAY:-150}" $W scripts/profile_replay.py --peer impl.candidates.mhc_one_program:Candidate \
      --repeats 5 --json "$OUT/replay.json" > "$OUT/replay.log" 2>&1; echo "== replay: exit $?" >> "$OUT/summary.txt"
  timeout "${T_SERVING:-120}" $W run --device cuda --mechanism serving --examples "${EX:-12}" --seed 0 \
      --json "$OUT/serving.json" > "$OUT/serving.log" 2>&1; echo "== serving: exit $?" >> "$OUT/summary.txt"
fi
cat "$OUT/summary.txt"
[ -f "$OUT/variants.log" ] && { echo "=== variants"; grep -v "Warn\|warn(" "$OUT/variants.log" | cut -c1-240; }
for s in ${SEEDS:-0 1}; do echo "=== gate seed $s"; grep "with_mhc_launch\|│\|checks:\|rror" "$OUT/gate_s$s.log" \
    | grep -v "example \|Warn\|warn(" | cut -c1-200; done
if [ -n "${MEASURE:-}" ]; then
  echo "=== bench"; grep -v "Warn\|warn(" "$OUT/bench_mhc.log" | tail -8 | cut -c1-200
  echo "=== replay"; grep "^===\|compare\|mhc_" "$OUT/replay.log" | cut -c1-220
  echo "=== serving"; grep "checks\|FAIL\|rror" "$OUT/serving.log" | tail -5 | cut -c1-200
fi
