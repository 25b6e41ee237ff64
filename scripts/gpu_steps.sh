# Shared by the issue 14 GPU step scripts (source it after setting OUT and NAME; PARTS, SEEDS optional):
#   L            $OUT/$NAME, where each step's log lands
#   has PART     whether PART is in $PARTS (the steps to run)
#   passed P     whether every gate log $L/P_*.log passed (1 / 0)
#   step NAME T CMD...   CMD under a T-second timeout, its output to $L/NAME.log, its exit code and time
#                to $L/summary.txt; then $L is re-archived to $OUT/$NAME.tgz, so a call cut at its
#                limit still returns every step that ran
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
L=$OUT/$NAME
mkdir -p "$L"
# archived once more when the script ends: lines appended to summary.txt after the last step (verdicts) reach the tgz
trap 'tar czf "$OUT/$NAME.tgz" -C "$OUT" "$NAME"' EXIT
SEEDS=${SEEDS:-0 1}
# tiny_config NAME [softplus]: the tiny checkpoint's config at /tmp/NAME with KDA head dim 128 (the tiny
# geometry's head dims <= 32 never reach the GPU's K tiles of 32-64); softplus: with the softplus gate
# (linear_lower_bound None), whose strong decays take the exact pairs
tiny_config() {
  python3 -m gate.cli checkpoint make-tiny "/tmp/$1" > /dev/null && python3 -c "
import json, sys; p = '/tmp/$1/config.json'; c = json.load(open(p)); t = c.get('text_config', c)
t['linear_head_dim'] = 128
if sys.argv[1] == 'softplus':
    t['linear_lower_bound'] = None
json.dump(c, open(p, 'w'))" "${2:-bounded}" && rm -f "/tmp/$1/model.safetensors"
}
# the MLA kernels' GPU tests (pytest -m gpu), as the step scripts since stop 60 run them
MLA_GPU_TESTS="tests/test_mla_q_strides.py tests/test_mla_out_uv.py tests/test_mla_producer.py tests/test_mla_heads64.py
       tests/test_mla_prefetch.py tests/test_mla_merge.py tests/test_mla_stage_o.py"
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
# passed PREFIX: 1 when every $L/PREFIX_*.log is a gate verdict with nothing failed, regressed, uncovered, errored
# or not run (a missing log counts as not passed), else 0
passed() { local p=1; for f in "$L"/$1_*.log; do grep -qs "0 failed, 0 regressions, 0 not covered, 0 errors, 0 not run" "$f" || p=0; done; echo $p; }
# matrix_passed: 1 when every $L/matrix*.log reports nothing failed, errored, uncovered or not run (none: 0)
matrix_passed() {
  local m=1 f
  for f in "$L"/matrix*.log; do grep -qs " 0 failed, 0 errors, 0 not covered, 0 not run" "$f" || m=0; done
  echo $m
}
# tests_passed LOG: 1 when LOG's last line is pytest's summary with passes and no failure or error, else 0
tests_passed() {
  tail -1 "$1" 2>/dev/null | grep -qE "[0-9]+ passed" && ! tail -1 "$1" | grep -qE "failed|error" && echo 1 || echo 0
}
# caught_in LOG...: how many mutants the zoo logs show caught
caught_in() { cat "$@" 2>/dev/null | grep -cE '^│ [a-z_0-9]+ +│ caught'; }
step() {
  local name=$1 t=$2 t0; shift 2; t0=$(date +%s)
  timeout "$t" "$@" > "$L/$name.log" 2>&1
  echo "== $name: exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$L/summary.txt"
  tar czf "$OUT/$NAME.tgz" -C "$OUT" "$NAME"
}
# landed_copy PATCH...: a copy of this tree at /tmp/landed with scripts/patches/PATCH.patch applied, in order, for a
# landing's checks beside the gate; run a command there as `step NAME T $LANDED cmd...` (its own sources on the path)
LANDED="env -C /tmp/landed PYTHONPATH=/tmp/landed"
landed_copy() {
  local p
  rm -rf /tmp/landed && cp -a "$PWD" /tmp/landed || return 1
  for p in "$@"; do (cd /tmp/landed && git apply "scripts/patches/$p.patch") || return 1; done
  echo "the landed copy: $(printf '%s.patch ' "$@")applied at /tmp/landed" | tee -a "$L/summary.txt"
}
# landed_verdict STEP N: the landed copy's line in summary.txt: its matrix (matrix*.log), how many of its N mutants
# zool.log shows caught, its GPU tests (testsl.log), and commit: 1 where all hold and the verdict printed `lands: STEP`
landed_verdict() {
  local m tw z v
  m=$(matrix_passed); tw=$(tests_passed "$L/testsl.log"); z=$(caught_in "$L/zool.log")
  v=$(grep -c "^lands: $1" "$L/summary.txt")
  echo "landed copy: matrix passed $m; mutants caught $z of $2; tests $tw; commit: $([ "$v" = 1 ] && [ $m = 1 ] && [ "$z" = "$2" ] && [ $tw = 1 ] && echo 1 || echo 0)" \
      | tee -a "$L/summary.txt"
}
# report TESTLOG...: what a call prints last: summary.txt, each gate's and matrix's verdict line and first failures,
# the last line of each named pytest log ($L/TESTLOG.log), the zoo tables' rows, the probe's times and the MLA bench
report() {
  local f t
  echo "=== summary"; cat "$L/summary.txt"
  for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && echo "$(basename "$f"): $(grep -E 'checks:' "$f" | tail -1)"; done
  for f in "$L"/gate*.log "$L"/matrix*.log; do [ -f "$f" ] && grep -E "REGRESSION|FAIL" "$f" | head -3 | cut -c1-220; done
  for t in "$@"; do echo "$t: $(tail -1 "$L/$t.log" | cut -c1-200)"; done
  cat "$L"/zoo*.log | grep -E "^│ [a-z]" | cut -c1-90
  [ -f "$L/probe.log" ] && grep -E "us \[|device|oracle" "$L/probe.log" | cut -c1-200
  [ -f "$L/bench_mla.log" ] && grep -vE "^\s*$|Warn|warn" "$L/bench_mla.log" | tail -10 | cut -c1-200
  true
}
