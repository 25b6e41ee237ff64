#!/usr/bin/env bash
# Issue 12, paged caches on CUDA (bf16): the paged kernels (the MLA attention reading through the block
# table, the paged gather under the indexer) compiled for the device, the two paged checks of the
# matrix, their mutants, the paged unit tests, and the outside paged candidates through `glmgate gate`
# (the correct one passes, the one reading a page past its row fails). Usage on the H200, from the repo
# root: bash scripts/gpu_paged_check.sh   (OUT: where logs go; EX: drawn examples per gate check)
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
EX=${EX:-40}
mkdir -p "$OUT"
{
echo "== kernels (sm_90): the MLA kernel unpaged and paged"
timeout 300 python3 -m gate.compile_check --kernel mla_sparse_absorbed_fwd_kernel
echo "== the paged checks in bf16 on cuda (gpu profile), and the contiguous MLA / DSA ones the kernel edit touches"
timeout 600 python3 -m pytest -q -m gpu tests/test_matrix.py -k "paged or mla.absorbed or dsa.index" -p no:cacheprovider
echo "== the paged unit tests (CPU tensors: the Triton interpreter, as in CI)"
TRITON_INTERPRET=1 timeout 300 python3 -m pytest -q tests/test_paged.py -p no:cacheprovider
echo "== the paged mutants, caught on cuda"
for mc in dsa_paged_page_past_row:dsa.index_paged dsa_paged_whole_last_page:dsa.index_paged \
          mla_paged_first_row_table:mla.absorbed_paged; do
  m=${mc%%:*}; c=${mc#*:}
  timeout 120 python3 -m gate.cli run --impl "mutant:$m" --device cuda --check "$c" --examples 20 \
    --json "$OUT/mutant_$m.json" > "$OUT/mutant_$m.log" 2>&1
  echo "mutant:$m on $c exit $? (1 = caught)"
done
echo "== outside paged candidates through the gate"
cd tests/outside
for cand in dsa_paged_mine:Paged dsa_paged_mine:PagePastRow; do
  timeout 300 python3 -m gate.cli gate --candidate "$cand" --device cuda --examples "$EX" --no-failures \
    --check dsa.index_paged --json "$OUT/gate_${cand#*:}.json" > "$OUT/gate_${cand#*:}.log" 2>&1
  echo "$cand exit $? (expected: Paged 0, PagePastRow 1)"
  grep -E "dsa.index_paged" "$OUT/gate_${cand#*:}.log" | head -3
done
} 2>&1 | tee "$OUT/gpu_paged_check.log"
