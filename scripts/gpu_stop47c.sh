#!/usr/bin/env bash
# Stop 47's third GPU call: ours after steps 41 (64 heads a program from 8 query rows) and 42 (the split merge in
# one pass) through the MLA check matrix on the GPU, two new seeds, 20 examples a check, and the MLA GPU tests:
#   OUT=/tmp/out bash scripts/gpu_stop47c.sh
set -u
NAME=${NAME:-stop47c}
source "$(dirname "$0")/gpu_steps.sh"
export OMP_NUM_THREADS=3
R="--device cuda --examples 20 --no-failures"
step tests 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_mla_merge.py tests/test_mla_heads64.py \
    tests/test_mla_prefetch.py tests/test_kernel_paths.py &
step run_s70 240 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
    --check mla.rerun --seed 70 &
step run_s71 240 python3 -m gate.cli run $R --check mla.absorbed --check mla.batch --check mla.absorbed_paged \
    --check mla.rerun --seed 71 &
step run_2_s70 240 python3 -m gate.cli run $R --check mla.paths --check mla.causal --check mla.graph_replay \
    --check model.paths --seed 70 &
wait
echo "=== summary"; cat "$L/summary.txt"
tail -3 "$L/tests.log" | cut -c1-200
for f in "$L"/run_*.log; do echo "-- $f"; grep -E "│ (mla|model|dsa)|checks|FAIL|Error" "$f" | cut -c1-180 | tail -8; done
true
