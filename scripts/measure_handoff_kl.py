"""Worst model.paths continuation verdicts (logits, the bf16-persisted quantization gate) over drawn cases.

Usage: PYTHONPATH=. python3 scripts/measure_handoff_kl.py DEVICE DTYPE IMPL N [CONFIG]  (e.g. cuda bfloat16 triton 40)
CONFIG: a config.json (or its directory) instead of the tiny preset (a softplus-gate config: weaker decays
keep the persisted state's rounding longer).
"""
import sys, json
dev, dt, impl_name, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
from gate.cli import _target
from invariants.matrix import evaluate, checks_for
from oracle.config import Geometry
from hypothesis import given, settings, HealthCheck, Phase
chk = [c for c in checks_for(["model"]) if c.name == "model.paths"][0]
cand, base = _target(impl_name, dev, dt)
rows = []
cases = list(chk.examples)
@settings(max_examples=n, deadline=None, derandomize=True, phases=[Phase.generate], suppress_health_check=list(HealthCheck), database=None)
@given(chk.cases(Geometry.from_pretrained(sys.argv[5]) if len(sys.argv) > 5 else Geometry.preset("tiny")))
def t(c): cases.append(c)
t()
for c in cases:
    for v in evaluate(chk, c, cand, base):
        k = v.contract.key
        if v.contract.path.startswith("continuation") and v.contract.quantity in ("logits", "quantization"):
            rows.append((k, (v.value/v.limit if v.limit else v.value), (v.detail or str(v.metrics))[:240]))
import collections
worst = collections.defaultdict(lambda: (-1, ""))
for k, r, d in rows:
    if r is not None and r > worst[k][0]: worst[k] = (r, d)
for k, (r, d) in worst.items(): print(f"{k}: worst ratio {r:.3g} over {len(cases)} cases: {d}")
