"""The MoE row of the correctness matrix on the Triton implementation (CPU interpreter, float32):
expert ids tie-aware, mixture weights from the raw sigmoid, and the layer output with the SwiGLU
clamps firing. The oracle's own properties are tests/test_oracle_moe.py; the kernels' edge cases
(experts with zero or one token, K off the tile) tests/test_moe_kernels.py."""
from __future__ import annotations

from hypothesis import example, given

from gate.runner import run_one
from invariants.matrix import BY_NAME
from invariants.target import cpu_targets
from oracle.config import Geometry
from strategies import cases as sc

TINY = Geometry.preset("tiny")



@given(sc.moe_cases(TINY))
@example(sc.MoECase(32, 8, 2, 2, 1, 16, 7, "tied", 0))
@example(sc.MoECase(32, 8, 4, 4, 2, 16, 5, "normal", 1))
def test_route(case):
    run_one(BY_NAME["moe.route"], case, *cpu_targets())


@given(sc.moe_cases(TINY))
@example(sc.MoECase(32, 8, 2, 2, 1, 16, 9, "clamps", 0))
@example(sc.MoECase(48, 8, 1, 1, 1, 16, 1, "normal", 1))
def test_forward(case):
    run_one(BY_NAME["moe.forward"], case, *cpu_targets())
