import cProfile, pstats, torch, time
import numpy as np
from oracle.config import PRESETS
from invariants.matrix import BY_NAME
import impl.mhc as m
import inspect
print(inspect.signature(m.fused_coefficients_collapse))
