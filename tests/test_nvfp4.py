"""The NVFP4 row of the correctness matrix: quantization (codes, block scales, global scale) and
dequantization (from linear and from 128x4-swizzled scales) bit-exact against the oracle. The format's
own boundary table, packing and checkpoint layouts are tests/test_oracle_nvfp4.py."""
from __future__ import annotations

from hypothesis import example, given

from invariants.engine import run_one
from invariants.matrix import BY_NAME
from invariants.target import cpu_targets
from oracle.config import Geometry
from strategies import cases as sc

TINY = Geometry.preset("tiny")



@given(sc.nvfp4_cases(TINY))
@example(sc.NVFP4Case(3, 32, "ties", 0))
@example(sc.NVFP4Case(130, 48, "subnormal_scales", 1))
def test_quantize(case):
    run_one(BY_NAME["nvfp4.quantize"], case, *cpu_targets())


@given(sc.nvfp4_cases(TINY))
@example(sc.NVFP4Case(130, 144, "zero_blocks", 2))
def test_dequantize(case):
    run_one(BY_NAME["nvfp4.dequantize"], case, *cpu_targets())
