#!/usr/bin/env bash
# Stop 35 on the H200, issue 14 steps 23 (owed re-time after its NaN fix) and 24 (docs/optimization_log.md):
#  bench   H = 64 and 8, T = 16384, 5 alternating repeats: ours, step 18's winners, step 23 (Γ first) against
#          fla (scripts/kda_prefill_variants.py, every variant oracle-checked first); then gate.bench_kda
#          --from-gate: the prefill from the gate's input f, ours' torch gate vs step 24's fused gate vs fla's
#          gate in kernel (general and bounded-gate paths), and fla's bounded-gate path on precomputed g
#  tests   the Γ-first, fused-gate and strong-decay bf16 tests against the oracle (and the strong-decay
#          second compile bit for bit where it adds nothing)
#  gate    glmgate gate of impl.candidates.kda_gate_fused against ours (its chunked is step 23's, so this is
#          step 23's owed re-gate too): kda.chunked, causal, paths, packed, batch, sublayer and model.paths,
#          $EX examples at each of $SEEDS
#  softplus ours' kda matrix on a softplus-gate config (linear_lower_bound null): the strong-decay fix
#  matrix  ours' kda matrix on the default geometry (bounded gate), bf16, with the kernel-path report: the
#          strong-decay kernel change must leave the bounded path's verdict as it was
#  VARIANTS=a,b  the bench's variants of ours (scripts/kda_prefill_variants.py names); FROM_GATE=0 skips
#          the from-gate bench
#  BREAKDOWN=N  the bench also prints each path's device time kernel by kernel (N profiled calls)
#  PRE_FIX=FILE  the bench also times ours' wrapper with FILE's (an earlier commit's) intra kernel, the strong-
#          decay fix's cost on the bounded gate: `mkdir -p .prefix && git show 2d3c0ef:impl/kernels/kda.py >
#          .prefix/kda_kernels_2d3c0ef.py` here, carry ".prefix", PRE_FIX=.prefix/kda_kernels_2d3c0ef.py
#   OUT=/tmp/out PARTS="bench tests softplus gate" SEEDS="0 1" bash scripts/gpu_stop35_kda.sh
set -u
NAME=stop35_kda
PARTS=${PARTS:-bench tests softplus matrix gate}
# CHECKS="kda.scale kda.batch" runs those checks only in the softplus and matrix parts (a call's share of
# the kda matrix: a cold --mechanism kda at 20 examples takes well over 110 s on the GPU, kda.scale's
# full-size pins over 50 s an example)
if [ -n "${CHECKS:-}" ]; then KDA_SELECT=$(printf -- "--check %s " $CHECKS); else KDA_SELECT="--mechanism kda"; fi
source "$(dirname "$0")/gpu_steps.sh"
has bench && step variants "${T_VARIANTS:-200}" python3 scripts/kda_prefill_variants.py \
    --shapes "${SHAPES:-64:16384,8:16384}" --repeats 5 --variants "${VARIANTS:-inv_sub+cap168,gc+inv_sub+cap168}" \
    --json "$L/variants.json" ${PRE_FIX:+--pre-fix "$PRE_FIX"} ${BREAKDOWN:+--breakdown "$BREAKDOWN"}
has bench && [ "${FROM_GATE:-1}" = 1 ] && step from_gate "${T_BENCH:-200}" python3 -m gate.bench_kda --skip-decode \
    --shapes "${SHAPES:-64:16384,8:16384}" --from-gate --repeats 5 --json "$L/from_gate.json"
has tests && step tests "${T_TESTS:-180}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_gate_fused.py \
    tests/test_kda_strong_decays.py tests/test_kda_intra_blocked.py -k "gamma or fused or strong or compile"
# ours' KDA on a softplus-gate config (strong decays: the intra kernel's pairs pass), bf16 on the GPU
if has softplus; then
  python3 -m gate.cli checkpoint make-tiny "$L/softplus" > /dev/null && python3 - "$L/softplus/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
t = c.get("text_config", c)
t["linear_lower_bound"] = None
t.setdefault("linear_attn_config", {})["safe_gate"] = False
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
  for seed in $SEEDS; do
    step "softplus_s$seed" "${T_SOFTPLUS:-300}" python3 -m gate.cli run --device cuda --config "$L/softplus" \
        $KDA_SELECT --examples "${EX:-20}" --seed "$seed" --no-failures
  done
fi
for seed in $SEEDS; do
  has matrix && step "matrix_s$seed" "${T_MATRIX:-300}" python3 -m gate.cli run --device cuda $KDA_SELECT \
      --examples "${EX:-20}" --seed "$seed" --no-failures --kernel-paths
done
for seed in $SEEDS; do
  has gate && step "gate_s$seed" "${T_GATE:-260}" python3 -m gate.cli gate --device cuda \
      --candidate impl.candidates.kda_gate_fused:Candidate --baseline triton --check kda.chunked \
      --check kda.causal --check kda.paths --check kda.packed --check kda.batch --check kda.sublayer \
      --check model.paths --examples "${EX:-20}" --seed "$seed" --json "$L/gate_s$seed.json"
done
echo "=== summary"; cat "$L/summary.txt"
has bench && { echo "=== variants"; grep -E "REFUSED|ms| us  |per call" "$L/variants.log" | cut -c1-160 | tail -90;
               echo "=== from gate"; grep -E "REFUSED|NOT comparable|fla safe|from the gate|    [a-z]" "$L/from_gate.log" | cut -c1-160; }
has tests && { echo "=== tests"; tail -3 "$L/tests.log"; }
has softplus && { echo "=== softplus"; for f in "$L"/softplus_s*.log; do tail -4 "$f" | cut -c1-200; done; }
has matrix && { echo "=== matrix"; for f in "$L"/matrix_s*.log; do grep -E "passed|FAIL|not reached|NOT" "$f" | cut -c1-200 | tail -8; done; }
has gate && { echo "=== gate"; for f in "$L"/gate_s*.log; do tail -12 "$f" | cut -c1-200; done; }
true
