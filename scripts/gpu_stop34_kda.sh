#!/usr/bin/env bash
# Stop 34 on the H200, issue 14 steps 18 / 21 / 23 (docs/optimization_log.md): the KDA prefill's intra-kernel
# variants timed against ours and fla (scripts/kda_prefill_variants.py, every variant oracle-checked first),
# the candidates' bf16 tests, then the gate of the fastest candidate against ours at each of $SEEDS.
#  bench   H = 64 (and $SHAPES), T = 16384: ours, fla, step 18's winners combined (inv_sub+cap168 =
#          impl.candidates.kda_intra_tuned), step 21 (stack, stack+inv_sub+cap168 = kda_intra_stacked),
#          step 23 (gc, gc+inv_sub+cap168 = kda_intra_gc, gc+stack+inv_sub+cap168), 5 repeats
#  tests   the stacked and Γ-first bf16 tests against the oracle (tests/test_kda_intra_blocked.py)
#  gate    glmgate gate: the fastest of the three candidates against ours (kda.chunked, causal, paths,
#          packed, batch), $EX examples
#   OUT=/tmp/out PARTS="bench tests gate" SEEDS=0 bash scripts/gpu_stop34_kda.sh
set -u
NAME=stop34_kda
PARTS=${PARTS:-bench tests gate}
source "$(dirname "$0")/gpu_steps.sh"
has bench && step bench "${T_BENCH:-260}" python3 scripts/kda_prefill_variants.py --shapes "${SHAPES:-64:16384}" \
    --repeats 5 --variants inv_sub+cap168,stack,stack+inv_sub+cap168,gc,gc+inv_sub+cap168,gc+stack+inv_sub+cap168 \
    --json "$L/bench.json"
has tests && step tests 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_kda_intra_blocked.py \
    -k "stacked or gamma"
CAND=$(python3 - "$L/bench.json" <<'PY'
import json, sys
cands = {"inv_sub+cap168": "kda_intra_tuned", "stack+inv_sub+cap168": "kda_intra_stacked",
         "gc+inv_sub+cap168": "kda_intra_gc"}
try:
    res = json.load(open(sys.argv[1]))
    res = res.get("results", res)
    shape = next(v for k, v in res.items() if k.startswith("64:"))
    best = min((shape[n]["median_ms"], m) for n, m in cands.items() if n in shape)[1]
except Exception as e:
    print(f"no bench result ({e}): gating kda_intra_tuned", file=sys.stderr)
    best = "kda_intra_tuned"
print(f"impl.candidates.{best}:Candidate")
PY
)
echo "gating $CAND" | tee -a "$L/summary.txt"
for seed in $SEEDS; do
  has gate && step "gate_s$seed" "${T_GATE:-230}" python3 -m gate.cli gate --device cuda --candidate "$CAND" \
      --baseline triton --check kda.chunked --check kda.causal --check kda.paths --check kda.packed \
      --check kda.batch --examples "${EX:-20}" --seed "$seed" --json "$L/gate_s$seed.json"
done
echo "=== summary"; cat "$L/summary.txt"
has bench && { echo "=== bench"; grep -E "REFUSED|H=.*ms" "$L/bench.log" | cut -c1-160; }
has tests && { echo "=== tests"; tail -3 "$L/tests.log"; }
has gate && { echo "=== gate"; for f in "$L"/gate_s*.log; do tail -9 "$f" | cut -c1-200; done; }
true
