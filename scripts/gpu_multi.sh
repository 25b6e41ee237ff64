#!/usr/bin/env bash
# The suite across GPUs: times `glmgate run --device cuda` at --gpus 1 and --gpus 2 (when the host has 2
# GPUs) and compares the two reports: the wall times, "verdicts identical: yes/no" (every check's status,
# the summary, the exit code) and "reports identical, timings aside: yes/no" (every field of every check
# but its seconds), with the first differences.
#
# Usage: bash scripts/gpu_multi.sh [glmgate run options]      default: --profile gpu (the whole matrix)
#   bash scripts/gpu_multi.sh --profile gpu --mechanism kda,mla,moe --examples 10    a subset (fits a
#     10-minute call: the whole matrix under gpu is estimated at ~22 min on one H200, ~11 at two)
#   SHARE=1      on a one-GPU host also runs --gpus 2 with both workers on the one GPU
#                (GLMGATE_GPUS_SHARE=1): the merged verdict is checked; its wall time is not a 2-GPU one
#   GATE=X       also times `glmgate gate --candidate X --device cuda` (same options) at 1 and 2 GPUs
#   PYTEST=1     also checks `pytest --gpus-per-worker`: each xdist worker sees one GPU, its own when
#                there are enough (a probe test), then times `pytest -m gpu` at -n 1 and at -n <GPUs>
#   LIMIT=s      stops each run after s seconds (SIGINT: the report covers what finished, exit 130)
#   DEVICE=cpu   a smoke test of this script without a GPU (2 worker processes in the interpreter)
# Each run replays its own copy of the failure store ($GLMGATE_FAILURES, else ./.glmgate-failures): a
# failure the first run records must not become an extra example of the second. Each run also compiles
# the Triton kernels into a fresh cache (TRITON_CACHE_DIR), so the second run is not timed on the first's
# compiled kernels; COLD=0 keeps the usual cache for both (the first then pays every compile).
# Results in $OUT (default /tmp/out): <tag>.json, <tag>.log, multi.log.
set -u
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(--profile gpu)
STORE=${GLMGATE_FAILURES:-.glmgate-failures}
LIMIT=${LIMIT:-0}
work=$(mktemp -d)
nvidia-smi -L 2>/dev/null
DEVICE=${DEVICE:-cuda}
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
echo "CUDA devices visible to torch: $NGPU" | tee "$OUT/multi.log"
[ "$DEVICE" = cpu ] && NGPU=2 && echo "DEVICE=cpu: --gpus 2 is two worker processes without a GPU" | tee -a "$OUT/multi.log"

timed() {  # timed TAG GPUS CMD [OPTIONS...]: one glmgate run, its own store copy, wall time and exit code
  local tag=$1 gpus=$2 cmd=$3
  shift 3
  mkdir -p "$work/store_$tag"
  [ -d "$STORE" ] && cp -r "$STORE/." "$work/store_$tag/"
  local t0 t1 rc
  if [ "${COLD:-1}" = 1 ]; then export TRITON_CACHE_DIR=$work/triton_$tag; fi
  t0=$(date +%s.%N)
  timeout -s INT "$LIMIT" python3 -m gate.cli "$cmd" --device "$DEVICE" "$@" --gpus "$gpus" \
    --failures "$work/store_$tag" --json "$OUT/$tag.json" > "$OUT/$tag.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  echo "$rc" > "$OUT/$tag.rc"
  printf '%-16s glmgate %s --gpus %s: exit %s, %s s wall\n' "$tag" "$cmd" "$gpus" "$rc" \
    "$(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }")" | tee -a "$OUT/multi.log"
  grep -E "^split over .* s wall$|^  worker [0-9]+ \(.*\): [0-9]+ checks in" "$OUT/$tag.log" | tee -a "$OUT/multi.log"
}

compare() {  # compare TAG1 TAG2 KIND: the two reports, field by field
  python3 - "$OUT" "$1" "$2" "$3" <<'PY' | tee -a "$OUT/multi.log"
import json, os, sys
out, a_tag, b_tag, kind = sys.argv[1:]
TIMINGS = {"seconds", "candidate_seconds", "shrink_seconds"}

def load(tag):
    try:
        doc = json.load(open(os.path.join(out, tag + ".json")))
    except (OSError, ValueError) as e:
        return None, f"no report ({e})"
    rc = open(os.path.join(out, tag + ".rc")).read().strip()
    return doc, rc

def rows(doc):
    if kind == "run":
        return [(r["check"], r) for r in doc["results"]]
    return [(c["check"], c) for c in doc["checks"]]

def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in TIMINGS and k != "warmup_seconds"}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x

(a, arc), (b, brc) = load(a_tag), load(b_tag)
if a is None or b is None:
    print(f"{kind} {a_tag} vs {b_tag}: {arc if a is None else brc}; verdicts identical: no")
    sys.exit(0)
ra, rb = rows(a), rows(b)
verdict = lambda rs: [(n, r["status"]) for n, r in rs]
same_verdict = verdict(ra) == verdict(rb) and a["summary"] == b["summary"] and arc == brc
diffs = []
if [n for n, _ in ra] != [n for n, _ in rb]:
    diffs.append(f"check order: {[n for n, _ in ra]} vs {[n for n, _ in rb]}")
for (n, x), (_, y) in zip(ra, rb):
    x, y = strip(x), strip(y)
    for k in sorted(set(x) | set(y)):
        if x.get(k) != y.get(k):
            diffs.append(f"{n}.{k}: {json.dumps(x.get(k), default=str)[:300]} vs {json.dumps(y.get(k), default=str)[:300]}")
meta = lambda d: {k: v for k, v in strip(d["meta"]).items() if k != "failures"}    # each run's own store copy
if meta(a) != meta(b):
    diffs.append(f"meta: {meta(a)} vs {meta(b)}")
print(f"{kind} {a_tag} vs {b_tag}: exit {arc} vs {brc}; {len(ra)} checks")
print(f"  {a_tag}: {a['summary'] if isinstance(a['summary'], str) else json.dumps(a['summary'])}")
print(f"  {b_tag}: {b['summary'] if isinstance(b['summary'], str) else json.dumps(b['summary'])}")
print(f"verdicts identical: {'yes' if same_verdict else 'no'}")
print(f"reports identical, timings aside: {'yes' if not diffs else 'no'}")
for d in diffs[:20]:
    print("  " + d)
PY
}

timed run_gpus1 1 run "${ARGS[@]}"
if [ "$NGPU" -ge 2 ]; then
  timed run_gpus2 2 run "${ARGS[@]}"
  compare run_gpus1 run_gpus2 run
elif [ "${SHARE:-0}" = 1 ]; then
  export GLMGATE_GPUS_SHARE=1
  timed run_gpus2_shared 2 run "${ARGS[@]}"
  unset GLMGATE_GPUS_SHARE
  compare run_gpus1 run_gpus2_shared run
else
  echo "one GPU: --gpus 2 not timed (SHARE=1 runs two workers on the one GPU to check the merged verdict)" \
    | tee -a "$OUT/multi.log"
fi

if [ -n "${GATE:-}" ]; then
  timed gate_gpus1 1 gate --candidate "$GATE" "${ARGS[@]}"
  if [ "$NGPU" -ge 2 ]; then
    timed gate_gpus2 2 gate --candidate "$GATE" "${ARGS[@]}"
    compare gate_gpus1 gate_gpus2 gate
  elif [ "${SHARE:-0}" = 1 ]; then
    export GLMGATE_GPUS_SHARE=1
    timed gate_gpus2_shared 2 gate --candidate "$GATE" "${ARGS[@]}"
    unset GLMGATE_GPUS_SHARE
    compare gate_gpus1 gate_gpus2_shared gate
  fi
fi

if [ "${PYTEST:-0}" = 1 ]; then
  # the probe lives under the repository so that its conftest.py (the pinning) applies
  probe=$PWD/.gpu_multi_probe
  mkdir -p "$probe"
  cat > "$probe/test_probe.py" <<'PY'
import json, os
import pytest
import torch

@pytest.mark.parametrize("i", range(8))
def test_probe(i):
    p = torch.cuda.get_device_properties(0)
    rec = {"worker": os.environ.get("PYTEST_XDIST_WORKER"), "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
           "count": torch.cuda.device_count(), "uuid": str(getattr(p, "uuid", p.name))}
    with open(os.path.join(os.environ["PROBE_OUT"], f"{rec['worker']}.json"), "w") as fh:
        json.dump(rec, fh)
PY
  n=$(( NGPU > 1 ? NGPU : 2 ))
  PROBE_OUT=$work python3 -m pytest -q -p no:cacheprovider -n "$n" --gpus-per-worker "$probe/test_probe.py" \
    > "$OUT/pytest_probe.log" 2>&1
  echo "pytest probe (-n $n --gpus-per-worker): exit $?" | tee -a "$OUT/multi.log"
  python3 - "$work" "$NGPU" <<'PY' | tee -a "$OUT/multi.log"
import glob, json, sys
recs = [json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + "/gw*.json"))]
for r in recs:
    print(f"  {r['worker']}: CUDA_VISIBLE_DEVICES={r['visible']}, torch sees {r['count']}, device {r['uuid']}")
ngpu = int(sys.argv[2])
ok = recs and all(r["count"] == 1 for r in recs) and (
    ngpu < 2 or len({r["uuid"] for r in recs}) == min(ngpu, len(recs)))
print(f"pinning: {'yes' if ok else 'no'} (each worker sees one GPU" + (", its own)" if ngpu >= 2 else ")"))
PY
  rm -rf "$probe"
  for w in 1 "$NGPU"; do
    [ "$w" = 1 ] && pin="" || pin="--gpus-per-worker"
    [ "$w" = 1 ] || [ "$NGPU" -ge 2 ] || continue
    if [ "${COLD:-1}" = 1 ]; then export TRITON_CACHE_DIR=$work/triton_pytest_n$w; fi
    t0=$(date +%s.%N)
    python3 -m pytest -q -p no:cacheprovider -m gpu -n "$w" $pin > "$OUT/pytest_gpu_n$w.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    printf 'pytest -m gpu -n %s %s: exit %s, %s s wall; %s\n' "$w" "$pin" "$rc" \
      "$(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }")" \
      "$(tail -n 1 "$OUT/pytest_gpu_n$w.log")" | tee -a "$OUT/multi.log"
  done
fi
echo "== $OUT/multi.log"
