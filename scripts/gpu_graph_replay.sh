#!/usr/bin/env bash
# Issue 13 item 6, CUDA-graph replay on CUDA (bf16): the decode steps of kda.graph_replay and
# mla.graph_replay captured in real torch.cuda.CUDAGraphs and replayed with each step's metadata copied
# into their persistent buffers. Usage on the H200, from the repo root:
#   bash scripts/gpu_graph_replay.sh          (OUT: where logs go; SEEDS; EX: drawn examples per check;
#                                              PART=1: parts 1-2 only, PART=2: parts 3-4 only, for two calls
#                                              under a 10-minute limit)
# What it must show:
#   1. the step really is a CUDA graph on cuda (`replay` is a CUDAGraph's), its replay bitwise equal to
#      its eager run, and a host read inside a step refused by the capture (the CPU cannot show that);
#   2. both checks pass for triton and torch over every seed (the summary: 0 failed, 0 errors), the worst
#      error/limit well under 1;
#   3. the four graph mutants caught on cuda (the zoo: exit 0, each row "caught");
#   4. the matrix's gpu tests of both checks pass.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
SEEDS=${SEEDS:-"0 1 2 3"}
EX=${EX:-200}
PART=${PART:-all}
mkdir -p "$OUT"
{
if [ "$PART" != 2 ]; then
echo "== 1. a real graph: capture, replay == eager bitwise, a host read refused under capture"
timeout 300 python3 - <<'EOF'
import numpy as np, torch
import impl.kda as ik
from invariants.graph_checks import KDAGraphCase, K0, graph_decode, kda_graph_inputs
from invariants.target import Target
from impl import registry
t = Target(registry.get("triton"), "cuda", torch.bfloat16)
case = KDAGraphCase(K0, 3, 2, ((0,), (0, 1), (1, 0), (2,)), "normal", 0)
w, pool, xs = kda_graph_inputs(case)
step = ik.decode_graph(t.weights(w), t.state(pool), 2)
z, f, b = xs[0]
step.capture(t.tensor(z), t.tensor(f, f32=True), t.tensor(b), t.index((0,), long=True))
print("replay is a CUDAGraph's:", isinstance(getattr(step._run, "__self__", None), torch.cuda.CUDAGraph))
e, r = (graph_decode(t, w, pool, case, xs, replay) for replay in (False, True))
print("replay == eager bitwise:", all(torch.equal(a, b) for a, b in zip(e[0], r[0])),
      torch.equal(e[1].recurrent, r[1].recurrent), torch.equal(e[1].conv, r[1].conv))
g = torch.cuda.CUDAGraph()
x = torch.ones(4, device="cuda")
try:
    with torch.cuda.graph(g):
        int(x.sum())
    print("a host read inside a capture: NOT refused")
except Exception as exc:
    print("a host read inside a capture is refused:", type(exc).__name__)
EOF
echo "== 2. both checks, triton and torch, seeds $SEEDS x $EX examples (bf16, one process per run)"
pids=""
for impl in triton torch; do
  for seed in $SEEDS; do
    timeout 420 python3 -m gate.cli run --device cuda --impl $impl --check kda.graph_replay --check mla.graph_replay \
      --examples "$EX" --seed "$seed" --no-failures --json "$OUT/graph_${impl}_$seed.json" \
      > "$OUT/graph_${impl}_$seed.log" 2>&1 &
    pids="$pids $!"
  done
done
wait $pids
python3 - "$OUT" <<'EOF'
import glob, json, sys
for path in sorted(glob.glob(f"{sys.argv[1]}/graph_*_*.json")):
    data = json.load(open(path))
    for r in data["results"]:
        print(f"{path.rsplit('/', 1)[1]:24s} {r['check']:18s} {r['status']:6s} {r['examples']:4d} examples, "
              f"worst error/limit {r['worst_ratio']:.3g}, {r['seconds']:.0f} s {r['message'][:200]}")
EOF
fi
if [ "$PART" != 1 ]; then
echo "== 3. the graph mutants on cuda"
timeout 300 python3 -m gate.cli zoo --device cuda --mutant kda_graph_live_rows_at_capture \
  --mutant kda_graph_padding_keeps_slots --mutant mla_graph_lengths_rebound --mutant mla_graph_width_at_capture \
  > "$OUT/graph_zoo.log" 2>&1
echo "zoo exit $? (0 = every mutant caught)"
grep -E "caught by|ESCAPED|ERROR" "$OUT/graph_zoo.log" | cut -c1-240
echo "== 4. the matrix's gpu tests of both checks"
timeout 280 python3 -m pytest -q -m gpu tests/test_matrix.py -k graph_replay -p no:cacheprovider 2>&1 | tail -3
fi
} 2>&1 | tee "$OUT/gpu_graph_replay.log"
