#!/usr/bin/env bash
# Stop 37, first call: the rest of the strong-decay fix's GPU matrix (what stop 36's H100 calls did not reach)
# on the bounded default geometry and on the softplus-gate config, and step 24's gate (impl.candidates.
# kda_gate_fused against ours) at seed 0: five processes side by side on one GPU (verdicts, not timings),
# each with its own limit, so a slow one (kda.scale's full-size pins, > 50 s an example) cuts only itself.
# kda.scale's pins are fixed cases, so it runs at seed 0 only; seed 1 draws the other checks afresh.
# On an 80 GB card kda.scale's B = 2, T = 64K pin ran out of memory beside the other four (stop 37, H100):
# there, re-run it alone (`glmgate run --device cuda --check kda.scale`).
# With PARTS="bench verdicts" the bench runs first, alone on the GPU: ours against the strong-decay fix's
# predecessor (PRE_FIX, the fix's cost), step 23, step 18's pair, fla and fla's bounded-gate path at
# H = 64, T = 16K, 5 repeats, then each path's device time kernel by kernel (BREAKDOWN calls).
#   OUT=/tmp/out PARTS="bench verdicts" PRE_FIX=.prefix/kda_kernels_2d3c0ef.py bash scripts/gpu_stop37.sh
#   (T_BENCH, T_SCALE, T_SEED: the step limits)
set -u
here=$(dirname "$0")
OUT=${OUT:-/tmp/out}
PARTS=${PARTS:-verdicts}
case " $PARTS " in *" bench "*)
  env OUT="$OUT/bench" PARTS=bench SHAPES="${SHAPES:-64:16384}" T_VARIANTS="${T_BENCH:-240}" \
      BREAKDOWN="${BREAKDOWN:-10}" FROM_GATE=0 \
      VARIANTS="${VARIANTS:-gc+inv_sub+cap168,pair}" bash "$here/gpu_stop35_kda.sh" > "$OUT/bench.txt" 2>&1 || true
  sed -n '/=== variants/,/=== from gate/p' "$OUT/bench.txt";;
esac
case " $PARTS " in *" verdicts "*) ;; *) exit 0;; esac
T_SCALE=${T_SCALE:-380}
T_SEED=${T_SEED:-180}
REST="kda.rerun kda.checkpoint kda.batch kda.graph_replay"
seeds() {  # $1 = matrix|softplus, $2 = limit variable: seeds 0 and 1 of the checks other than kda.scale
  for s in 0 1; do
    env OUT="$OUT/$1" PARTS="$1" SEEDS=$s CHECKS="$REST" "$2=$T_SEED" bash "$here/gpu_stop35_kda.sh"
  done
}
seeds matrix T_MATRIX > "$OUT/matrix.txt" 2>&1 &
seeds softplus T_SOFTPLUS > "$OUT/softplus.txt" 2>&1 &
env OUT="$OUT/matrix_scale" PARTS=matrix SEEDS=0 CHECKS=kda.scale T_MATRIX=$T_SCALE \
    bash "$here/gpu_stop35_kda.sh" > "$OUT/matrix_scale.txt" 2>&1 &
env OUT="$OUT/softplus_scale" PARTS=softplus SEEDS=0 CHECKS=kda.scale T_SOFTPLUS=$T_SCALE \
    bash "$here/gpu_stop35_kda.sh" > "$OUT/softplus_scale.txt" 2>&1 &
env OUT="$OUT/gate" PARTS=gate SEEDS=0 T_GATE=$T_SCALE bash "$here/gpu_stop35_kda.sh" > "$OUT/gate.txt" 2>&1 &
wait
for d in matrix matrix_scale softplus softplus_scale; do
  echo "=== $d"; cat "$OUT/$d/stop35_kda/summary.txt"
  grep -hE "^  kda|checks:|FAIL|Error" "$OUT"/$d/stop35_kda/{matrix,softplus}_s*.log 2>/dev/null | cut -c1-220
done
echo "=== step 24's gate, seed 0"; cat "$OUT/gate/stop35_kda/summary.txt"; tail -14 "$OUT/gate/stop35_kda/gate_s0.log" | cut -c1-220
