#!/usr/bin/env bash
# Stop 45's first GPU call: step 39's verdict (scripts/gpu_stop44h.sh: the split decode's GPU tests, its gate at
# seeds 49 / 50, then scripts/kda_decode_probe.py) and, beside the gates, ours' KDA GPU tests after commit 31bb879
# (the state pass's output launch made one function; it had not run on a GPU)
#   OUT=/tmp/out bash scripts/gpu_stop45.sh
set -u
export NAME=${NAME:-stop45}
source "$(dirname "$0")/gpu_steps.sh"
OMP_NUM_THREADS=2 step kda_tests "${T_TESTS:-300}" python3 -m pytest -q -p no:cacheprovider -m gpu \
    tests/test_kda_pieces.py tests/test_kda_x_w.py tests/test_kda_aqk_lower.py tests/test_kda_intra_split.py \
    tests/test_kda_off_ftz.py tests/test_kda_diag_nan_last.py tests/test_kda_gamma_diag.py &
PARTS="verify39" bash "$(dirname "$0")/gpu_stop44h.sh" > "$L/verify39.out" 2>&1
wait
PARTS="probe39" bash "$(dirname "$0")/gpu_stop44h.sh" > "$L/probe39.out" 2>&1
tar czf "$OUT/$NAME.tgz" -C "$OUT" "$NAME"
echo "=== kda_tests"; tail -3 "$L/kda_tests.log" | cut -c1-200
cat "$L/verify39.out" "$L/probe39.out"
