"""Every record of the correctness matrix (invariants/matrix.py) as a test, on every target.

CPU (always): the Triton kernels in the interpreter, float32, under the float32 entries of
invariants/contracts.d/. CUDA (`pytest -m gpu`): the compiled kernels in bf16 (real tiles, bf16
tl.dot) under the bf16 entries. Both run the record through the engine `glmgate run` uses
(invariants/engine.py): its pinned examples first, then the Hypothesis profile's draws (capped on the
CPU by the record's `cpu_examples`); the first failure is shrunk and reported with its repro line.
A new record is a new test here with no edit to this file.
"""
from __future__ import annotations

import os

import pytest
import torch

from impl import registry
from invariants.engine import run_check
from invariants.matrix import CHECKS
from invariants.profiles import default_profile
from invariants.target import Target
from oracle.config import Geometry

TINY = Geometry.preset("tiny")
GPU_EXAMPLES = os.environ.get("GLMGATE_GPU_EXAMPLES")


def _holds(check, device: str, dtype: torch.dtype, profile: str, max_examples=None) -> None:
    cand = Target(registry.get("triton"), device, dtype)
    base = Target(registry.get("torch"), device, dtype)
    r = run_check(check, TINY, cand, base, profile, max_examples=max_examples)
    print(f"{check.name}: {r.examples} examples, worst {r.worst_ratio:.3g} of the limit: {r.worst_line}")
    assert r.status == "pass", (f"{check.name} ({r.status}) on {device} {check.dtype or cand.dtype_name}: {r.message}\n"
                                f"shrunk case: {r.shrunk_case}\nrepro: {r.repro}")


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_check_holds_in_float32_on_the_interpreter(check):
    _holds(check, "cpu", torch.float32, default_profile())


@pytest.mark.gpu
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_check_holds_in_bf16_on_cuda(check):
    """GLMGATE_GPU_EXAMPLES sets the drawn examples per check (default: the `gpu` profile's 40); a record
    that declares one dtype (Check.dtype) runs in it."""
    _holds(check, "cuda", torch.bfloat16, "gpu", int(GPU_EXAMPLES) if GPU_EXAMPLES else None)
