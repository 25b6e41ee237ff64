"""Every check of the correctness matrix on the GPU: Triton kernels in bf16 on CUDA against the float64
oracle, under the bf16 entries of invariants/contracts.toml (the same `evaluate` the CLI runs).

The CPU suite runs the same checks in float32 through the Triton interpreter; this file is where the
compiled kernels (bf16 tl.dot, real tiles, H200 launch configs) meet the contracts. Run on the device:
`pytest -m gpu tests/test_matrix_gpu.py` (GLMGATE_GPU_EXAMPLES sets the examples per check).
"""
from __future__ import annotations

import os

import pytest
import torch

from invariants.engine import run_check
from impl import registry
from invariants.matrix import CHECKS
from invariants.target import Target
from oracle.config import Geometry

EXAMPLES = int(os.environ.get("GLMGATE_GPU_EXAMPLES", "40"))


@pytest.mark.gpu
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_check_holds_in_bf16_on_cuda(check):
    cand = Target(registry.get("triton"), "cuda", torch.bfloat16)
    base = Target(registry.get("torch"), "cuda", torch.bfloat16)
    r = run_check(check, Geometry.preset("tiny"), cand, base, "gpu", max_examples=EXAMPLES, seed=0)
    print(f"{check.name}: {r.examples} examples, worst {r.worst_ratio:.3g} of the limit: {r.worst_line}")
    assert r.status == "pass", f"{check.name} broke on CUDA bf16: {r.message}\nrepro: {r.repro}"
