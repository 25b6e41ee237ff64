#!/usr/bin/env bash
# Stop 46's second GPU call, after step 40 landed (ours: 64 heads a program from 16 query rows on):
#  check40   side by side: the GPU tests of the landed launch and step 38's bits; ours' MLA checks at seed 53
#            (10 examples a check, the pins of 16 query rows included)
#  bench     alone, each after the other: glmgate bench --mechanism mla (with --sweep), scripts/mla_small_b_probe.py
#            (below 16 rows: 64- and 32-head programs against ours), glmgate bench --mechanism kda (fla-core 0.6.0
#            and einops on PYTHONPATH: the decode table's fla-step column has not run before)
#   OUT=/tmp/out bash scripts/gpu_stop46b.sh
set -u
NAME=${NAME:-stop46b}
PARTS=${PARTS:-check40 bench}
source "$(dirname "$0")/gpu_steps.sh"
if has check40; then
  export OMP_NUM_THREADS=4
  step tests40b 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_heads64.py tests/test_mla_prefetch.py &
  step run40_s53 250 python3 -m gate.cli run --device cuda --examples 10 --no-failures --seed 53 --check mla.absorbed \
      --check mla.absorbed_paged --check mla.paths --check mla.batch &
  wait
fi
if has bench; then
  step bench_mla 240 python3 -m gate.cli bench --mechanism mla -- --sweep --mem-gib 60 --json "$L/bench_mla.json"
  step small 120 python3 scripts/mla_small_b_probe.py --json "$L/small.json"
  step bench_kda 200 python3 -m gate.cli bench --mechanism kda -- --json "$L/bench_kda.json"
fi
echo "=== summary"; cat "$L/summary.txt"
has check40 && { tail -2 "$L/tests40b.log" | cut -c1-200; grep -E "│ (mla|model|dsa)|checks:|FAIL|Error" "$L/run40_s53.log" | cut -c1-150; }
has bench && { echo "=== bench_mla"; grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -40 | cut -c1-200;
  echo "=== small"; grep -E "copy|rel-L2|us \[" "$L/small.log" | cut -c1-170;
  echo "=== bench_kda"; grep -vE "^\s*$|Warn|warn" "$L/bench_kda.log" | tail -40 | cut -c1-200; }
true
