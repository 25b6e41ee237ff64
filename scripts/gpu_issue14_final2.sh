#!/usr/bin/env bash
# Issue 14 steps 11 and 12 landed: the GPU matrix over the mechanisms they touch at further seeds, and the
# selection kernel's mutants planted in the packed form on the GPU.
#  zoo      the three selection-kernel mutants and the PAIRS one, on cuda
#  matrix   dsa,mla at seed $S1 and moe,nvfp4 at seed $S2 (20 examples), model.paths at seed 3
#   OUT=/tmp/out PARTS="zoo matrix" bash scripts/gpu_issue14_final2.sh
set -u
NAME=final2
PARTS=${PARTS:-zoo matrix}
source "$(dirname "$0")/gpu_steps.sh"
has zoo && step zoo 90 python3 -m gate.cli zoo --device cuda --mutant dsa_select_kernel_threshold16_bits \
    --mutant dsa_select_kernel_tail_over_picked_pool --mutant dsa_select_kernel_ranks_restart_per_tile
has matrix && step matrix_dsa_mla 150 python3 -m gate.cli run --device cuda --mechanism dsa,mla --examples 20 \
    --seed "${S1:-1}" --json "$L/matrix_dsa_mla.json"
has matrix && step matrix_moe_nvfp4 110 python3 -m gate.cli run --device cuda --mechanism moe,nvfp4 --examples 20 \
    --seed "${S2:-2}" --json "$L/matrix_moe_nvfp4.json"
has matrix && step model_paths 70 python3 -m gate.cli run --device cuda --check model.paths --examples 8 --seed 3 \
    --json "$L/model_paths.json"
echo "=== summary"; cat "$L/summary.txt"
has zoo && { echo "=== zoo"; grep -E "^│ [a-z]" "$L/zoo.log" | cut -c1-80; }
has matrix && { echo "=== matrix"; for f in "$L"/matrix_*.log "$L/model_paths.log"; do grep "checks:" "$f" | cut -c1-200; grep -i "fail" "$f" | head -5 | cut -c1-200; done; }
