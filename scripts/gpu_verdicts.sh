#!/usr/bin/env bash
# The GPU verdict run: the correctness matrix on CUDA in bf16 under the exploring profile (random draws,
# many examples), several Hypothesis seeds as parallel processes on one GPU (the float64 oracle runs on
# the CPU cores), then one summary over every seed: failures, errors, legal decision flips, ill-conditioned
# examples, the worst margin, and each seed's wall time.
#
# Usage: bash scripts/gpu_verdicts.sh [SEEDS] [EXAMPLES] [OTHER_SEEDS] [OTHER_EXAMPLES]
#   SEEDS seeds (1..SEEDS) of EXAMPLES examples for the checks whose outputs hang on a discrete decision
#   (selections, expert choices, the gate's top-1); OTHER_SEEDS seeds of OTHER_EXAMPLES for the rest.
#   Defaults 8 150 2 40. Results: $OUT/verdicts.json (every seed's glmgate JSON) and $OUT/verdicts.log.
#   FIRST=k starts the seeds at k (a second batch: FIRST=5 ... 4); LIMIT=s interrupts each process after
#   s seconds (SIGINT: glmgate writes the checks that finished and marks the rest "not run").
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
OUT=${OUT:-/tmp/out}
SEEDS=${1:-8}; EXAMPLES=${2:-150}; OTHER_SEEDS=${3:-2}; OTHER_EXAMPLES=${4:-40}; DEVICE=${DEVICE:-cuda}
FIRST=${FIRST:-1}; LIMIT=${LIMIT:-0}
DECISION="dsa.index mla.absorbed mla.paths moe.route moe.forward nvfp4.gate model.paths"
OTHERS="kda.recurrent kda.chunked kda.decode kda.sublayer kda.paths kda.packed kda.rerun mhc.coefficients mhc.write_back nvfp4.quantize nvfp4.dequantize"
work=$(mktemp -d)
mkdir -p "$OUT"
checks() { for c in $1; do printf -- "--check %s " "$c"; done; }
for s in $(seq "$FIRST" $((FIRST + SEEDS - 1))); do
  timeout -s INT "$LIMIT" python3 -m gate.cli run --device "$DEVICE" --profile explore --seed "$s" \
    --examples "$EXAMPLES" $(checks "$DECISION") --json "$work/decisions_$s.json" > "$work/decisions_$s.log" 2>&1 &
  if [ "$s" -lt $((FIRST + OTHER_SEEDS)) ]; then
    timeout -s INT "$LIMIT" python3 -m gate.cli run --device "$DEVICE" --profile explore --seed "$s" \
      --examples "$OTHER_EXAMPLES" $(checks "$OTHERS") --json "$work/others_$s.json" > "$work/others_$s.log" 2>&1 &
  fi
done
wait
python3 - "$work" "$OUT" <<'PY'
import glob, json, os, sys
work, out = sys.argv[1], sys.argv[2]
runs = {}
for f in sorted(glob.glob(os.path.join(work, "*.json"))):
    runs[os.path.basename(f)] = json.load(open(f))
json.dump(runs, open(os.path.join(out, "verdicts.json"), "w"), indent=1, default=str)
rows = {}
for name, run in runs.items():
    seed = name.split("_")[1].split(".")[0]
    for r in run["results"]:
        row = rows.setdefault(r["check"], dict(seeds=[], examples=0, statuses=[], flips=0, ill=0, worst=0.0, secs=[]))
        row["seeds"].append(seed)
        row["examples"] += r["examples"]
        row["statuses"].append(r["status"])
        row["flips"] += r.get("flip_examples", 0) or 0
        row["ill"] += r.get("ill_conditioned_examples", 0) or 0
        m = (r.get("margin") or {}).get("max", r.get("worst_ratio", -1))
        row["worst"] = max(row["worst"], m if m is not None else -1)
        row["secs"].append(round(r["seconds"], 1))
lines = [f"{'check':18s} {'seeds':>5s} {'examples':>8s} {'fail':>4s} {'error':>5s} {'flips':>5s} {'ill':>4s} {'max err/limit':>13s}  seconds per seed"]
for c, row in rows.items():
    lines.append(f"{c:18s} {len(row['seeds']):5d} {row['examples']:8d} {row['statuses'].count('fail'):4d} "
                 f"{row['statuses'].count('error'):5d} {row['flips']:5d} {row['ill']:4d} {row['worst']:13.3g}  {row['secs']}")
for name, run in runs.items():
    for r in run["results"]:
        if r["status"] in ("fail", "error"):
            lines.append(f"\n{name}: {r['check']} {r['status']}: {r['message'][:1500]}\n  {r.get('repro')}")
text = "\n".join(lines)
print(text)
open(os.path.join(out, "verdicts.log"), "w").write(text + "\n")
PY
for f in "$work"/*.log; do echo "== $f"; grep -v -i "warn" "$f" | tail -n 4; done
