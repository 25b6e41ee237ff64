#!/usr/bin/env bash
# Issue 14 step 38's probe on the GPU (docs/optimization_log.md "Step 38"): the sparse absorbed MLA decode kernel
# with the next block's selection entries (prefetch 1) or entries and latent rows (prefetch 2) loaded a block
# ahead, against ours in the same run, B = 1 / 32 / 128 at a 32K cache, ours' bits checked first.
#   OUT=/tmp/out bash scripts/gpu_stop44f.sh
set -u
NAME=${NAME:-stop44f}
PARTS=${PARTS:-probe38}
source "$(dirname "$0")/gpu_steps.sh"
has probe38 && step probe38 "${T_PROBE:-240}" python3 scripts/mla_prefetch_probe.py --repeats "${REPEATS:-5}" \
    --json "$L/probe38.json"
echo "=== summary"; cat "$L/summary.txt"
has probe38 && { echo "=== probe38"; grep -E "copy ceiling|bits|us \[|Error" "$L/probe38.log" | cut -c1-160; }
true
