#!/usr/bin/env bash
# The pytest plugin on a GPU (bf16, the gpu profile): a chunked-only candidate in a fresh directory must
# pass kda.chunked and skip kda.decode (not covered) and mhc.coefficients (not run), its items marked gpu;
# a planted bug must fail with its repro line; the example user test file must pass in bf16.
# On a checkout that is not pip-installed the pytest11 entry point is registered by a dist-info folder on
# PYTHONPATH (what `pip install -e .` writes). Usage there: bash scripts/gpu_plugin_check.sh
set -u
REPO=$PWD
OUT=${OUT:-/tmp/out}
EP=$(mktemp -d)
FRESH=$(mktemp -d)
mkdir -p "$OUT" "$EP/glmgate_checkout-0.0.dist-info"
printf 'Metadata-Version: 2.1\nName: glmgate-checkout\nVersion: 0.0\n' > "$EP/glmgate_checkout-0.0.dist-info/METADATA"
printf '[pytest11]\nglmgate = glmgate.pytest_plugin\n' > "$EP/glmgate_checkout-0.0.dist-info/entry_points.txt"
export PYTHONPATH=$REPO:$EP
cat > "$FRESH/mykernels.py" <<'PY'
import impl.kda as ik

class Good:
    class kda:
        chunked = staticmethod(ik.chunked)

class LastTokenZeroed:
    class kda:
        @staticmethod
        def chunked(*args, **kwargs):
            o, s, b = ik.chunked(*args, **kwargs)
            o = o.clone()
            o[:, -1] = 0
            return o, s, b
PY
nvidia-smi -L
cd "$FRESH"
python3 -m pytest --glmgate-candidate mykernels:Good --glmgate-device cuda --glmgate-check kda.chunked \
  --glmgate-check kda.decode --glmgate-check mhc.coefficients -m "gpu and glmgate" -rs -p no:cacheprovider \
  --junitxml "$OUT/good.xml" > "$OUT/good.log" 2>&1
echo "== good exit $?"
python3 -m pytest --glmgate-candidate mykernels:LastTokenZeroed --glmgate-device cuda --glmgate-check kda.chunked \
  -q -p no:cacheprovider --junitxml "$OUT/bad.xml" > "$OUT/bad.log" 2>&1
echo "== bad exit $?"
cd "$REPO"
python3 -m pytest examples/pytest/test_my_kernel.py -q -p no:cacheprovider > "$OUT/example.log" 2>&1
echo "== example exit $?"
for f in "$OUT"/*.log; do echo "=== $f"; grep -v "Warning\|warn(" "$f" | tail -n 25; done
