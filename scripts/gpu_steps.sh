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
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
step() {
  local name=$1 t=$2 t0; shift 2; t0=$(date +%s)
  timeout "$t" "$@" > "$L/$name.log" 2>&1
  echo "== $name: exit $? in $(( $(date +%s) - t0 )) s" | tee -a "$L/summary.txt"
  tar czf "$OUT/$NAME.tgz" -C "$OUT" "$NAME"
}
