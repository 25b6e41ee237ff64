#!/usr/bin/env bash
# Issue 13 item 11 on the GPU (bf16, compiled kernels): which declared kernel paths (invariants/kernel_paths.py)
# a GPU run reaches, above all the ones no CPU check can (their `why`): tf32 / bf16 dots everywhere, the KDA
# state pass's second V block and the sparse MLA kernel's second head block (full geometry: V = 128, 64 heads);
# and the four kernel mutants of the item through the zoo in bf16. Logs and JSON under $OUT.
# Usage: bash scripts/gpu_kernel_paths.sh
#
# What it must show:
#   tiny.log   "kernel paths: N of 105 reached"; every row whose why is "tf32 / bf16 dots ..." has launches > 0
#              (the gpu profile's tiles are the GPU's: CPU-only tile paths such as "a second K tile" may read 0,
#              the summary's "not reached" list then names them; that is expected, not a failure)
#   full.log   "kda_state_chunked_fwd_kernel ... carry pass, a second V block" and "mla_sparse_absorbed_fwd_kernel
#              ... a second head block" with launches > 0, every check pass
#   zoo.log    the four mutants caught: mla_split_empty_lse_zero, mla_combine_drops_last_split,
#              mla_online_softmax_no_rescale, kda_intra_k_tiles_not_accumulated (the last only where a drawn head
#              dim spans two K tiles of the GPU's 32: head dim 64 / 128 of the full geometry; ESCAPED at tiny
#              geometry on the GPU is the expected verdict there, the CPU's 16-wide tile is what reaches it)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
step() { local t0=$(date +%s); "$@"; local rc=$?; echo "== exit $rc in $(( $(date +%s) - t0 )) s: ${*:3:6}"; }
step timeout ${T_TINY:-240} python3 -m gate.cli run --device cuda --profile gpu --kernel-paths --no-failures \
  --mechanism kda,dsa,mla,mhc,moe,nvfp4 --examples ${EX:-15} --json "$OUT/paths_tiny.json" > "$OUT/tiny.log" 2>&1
grep -E "checks:|kernel paths:|not reached|^    " "$OUT/tiny.log" | head -60
step timeout ${T_FULL:-240} python3 -m gate.cli run --device cuda --profile gpu --kernel-paths --no-failures \
  --geometry full --check kda.chunked --check mla.absorbed --examples ${EX_FULL:-4} \
  --json "$OUT/paths_full.json" > "$OUT/full.log" 2>&1
grep -E "checks:|kernel paths:|second V block|second head block" "$OUT/full.log" | head -20
step timeout ${T_ZOO:-120} python3 -m gate.cli zoo --device cuda --mutant mla_split_empty_lse_zero \
  --mutant mla_combine_drops_last_split --mutant mla_online_softmax_no_rescale \
  --mutant kda_intra_k_tiles_not_accumulated > "$OUT/zoo.log" 2>&1
grep -v "Warn\|warn(\|: example " "$OUT/zoo.log" | tail -n 12
