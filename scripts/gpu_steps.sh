# Shared by the issue 14 GPU step scripts (source it after setting OUT and NAME; PARTS, SEEDS optional):
#   L            $OUT/$NAME, where each step's log lands
#   has PART     whether PART is in $PARTS (the steps to run)
#   step NAME T CMD...   CMD under a T-second timeout, its output to $L/NAME.log, its exit code and time
#                to $L/summary.txt; then $L is re-archived to $OUT/$NAME.tgz, so a call cut at its
#                limit still returns every step that ran
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
L=$OUT/$NAME
mkdir -p "$L"
SEEDS=${SEEDS:-0 1}
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
step() {
  local name=$1 t=$2 t0; shift 2; t0=$(date +%s)
  timeout "$t" "$@" > "$L/$name.log" 2>&1
  echo "== $name: exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$L/summary.txt"
  tar czf "$OUT/$NAME.tgz" -C "$OUT" "$NAME"
}
