import torch, time
from impl import registry
from invariants.matrix import CHECKS
from invariants.target import Target
cand = Target(registry.get("triton"), "cpu", torch.float32)
base = Target(registry.get("torch"), "cpu", torch.float32)
for c in CHECKS:
    if c.mechanism in ("model", "serving"): continue
    t = time.time()
    cmps = c.run(c.examples[0], cand, base) if c.examples else None
    print(c.name, len(c.examples), round(time.time()-t, 2), sorted({type(x.candidate).__name__ for x in cmps}) if cmps else None)
