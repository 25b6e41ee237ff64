import cProfile, pstats, sys, time
import torch
from impl import registry
from invariants.matrix import BY_NAME
from invariants.engine import run_one
from invariants.target import Target
name = sys.argv[1]
check = BY_NAME[name]
cand = Target(registry.get("triton"), "cpu", torch.float32)
base = Target(registry.get("torch"), "cpu", torch.float32)
if check.dtype: cand, base = cand.in_dtype(check.dtype), base.in_dtype(check.dtype)
case = check.examples[0]
run_one(check, case, cand, base)  # warm caches
t = time.time()
pr = cProfile.Profile(); pr.enable()
run_one(check, case, cand, base)
pr.disable()
print("total", time.time() - t)
st = pstats.Stats(pr); st.sort_stats("cumulative").print_stats(45)
