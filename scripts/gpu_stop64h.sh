#!/usr/bin/env bash
# Issue 14's targets re-measured after step 59 landed (stop 64; written for an H200, the issue's device; it ran on an
# H100, ~380 s, its bench_moe and KDA prefill steps cut at their limits); one
# bench at a time, each against the peer it names, measured in the same run:
#   replay     the three layer kinds' decode step (B = 1, 4096 context) from one CUDA graph, 5 runs, beside their
#              bytes floors at this machine's copy speed (scripts/profile_replay.py)
#   bench_mla  the sparse MLA decode (% of copy at B = 32 / 128, x dense SDPA at 128K B = 1)
#   bench_moe  NVFP4 W4A16 against our bf16 (N = 1 / 8 / 32, prefill)
#   bench_kda  the KDA decode (B = 1 / 16 / 64 / 256) against fla-core 0.6.0, then the prefill (H = 64 and 8,
#              T = 16K) if the time allows; needs the wheel in .whl/ (carry it):
#              python3 -m pip download --no-deps --only-binary=:all: -d .whl fla-core==0.6.0
#   OUT=/tmp/out bash scripts/gpu_stop64h.sh          (run it with a 420 s timeout, carry [".whl"])
set -u
NAME=${NAME:-stop64h}
LIMIT=${LIMIT:-390}
source "$(dirname "$0")/gpu_steps.sh"
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$L/summary.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/fla_core-*.whl \
  || echo "fla-core not installed: the KDA bench times ours alone" | tee -a "$L/summary.txt"
step replay 90 python3 scripts/profile_replay.py --kinds kda+dense,kda+sparse,dsa-full+sparse --repeats 5 \
    --json "$L/replay.json"
step bench_mla 60 python3 -m gate.cli bench --mechanism mla -- --json "$L/bench_mla.json"
step bench_moe 120 python3 -m gate.cli bench --mechanism moe -- --json "$L/bench_moe.json"
step bench_kda_decode 90 env PYTHONPATH=/tmp/site:$PWD python3 -m gate.bench_kda --skip-prefill \
    --batches 1,16,64,256 --json "$L/bench_kda_decode.json"
left=$((LIMIT - SECONDS - 10))
[ "$left" -gt 60 ] && step bench_kda_prefill $left env PYTHONPATH=/tmp/site:$PWD python3 -m gate.bench_kda \
    --skip-decode --shapes 64:16384,8:16384 --json "$L/bench_kda_prefill.json"
echo "=== summary"; cat "$L/summary.txt"
grep -E "^copy|^===|bytes floor|compare" "$L/replay.log" | cut -c1-230
for b in bench_mla bench_moe bench_kda_decode bench_kda_prefill; do
  [ -f "$L/$b.log" ] && { echo "=== $b"; grep -vE "^\s*$|Warn|warn\(" "$L/$b.log" | tail -22 | cut -c1-220; }
done
true
