import sys, time, torch
sys.path.insert(0, ".diag")
if sys.argv[2] == "fast":
    import impl, fastinterp
from impl import registry
from invariants.matrix import BY_NAME
from invariants.engine import run_one
from invariants.target import Target
check = BY_NAME[sys.argv[1]]
cand = Target(registry.get("triton"), "cpu", torch.float32)
base = Target(registry.get("torch"), "cpu", torch.float32)
if check.dtype: cand, base = cand.in_dtype(check.dtype), base.in_dtype(check.dtype)
case = check.examples[0]
run_one(check, case, cand, base)
t = time.time(); v = run_one(check, case, cand, base); print(sys.argv[1:], "s", round(time.time() - t, 2))
import pickle; pickle.dump([(x.value, x.limit) for x in v], open(f".diag/v_{sys.argv[1]}_{sys.argv[2]}.pkl", "wb"))
