"""Every record of the correctness matrix (invariants/matrix.py) as a test, on every target.

CPU (always): the Triton kernels in the interpreter, float32, under the float32 entries of
invariants/contracts.d/. CUDA (`pytest -m gpu`): the compiled kernels in bf16 (real tiles, bf16
tl.dot) under the bf16 entries. Both run the record through the engine `glmgate run` uses
(invariants/engine.py): its pinned examples first, then the Hypothesis profile's draws (capped on the
CPU by the record's `cpu_examples`); the first failure is shrunk and reported with its repro line.
A new record is a new test here with no edit to this file.

On the CPU every kernel launch is also judged against the declared kernel paths
(invariants/kernel_paths.py): under the derandomized `ci` profile a check must reach every path that
names it (its `by`), or the test fails naming the paths its examples no longer reach.
"""
from __future__ import annotations

import os

import pytest
import torch

from impl import registry
from invariants import kernel_paths
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
    if r.status == "not run":             # this machine cannot run it (model.sharded: fewer GPUs than ranks)
        pytest.skip(r.message)
    print(f"{check.name}: {r.examples} examples, worst {r.worst_ratio:.3g} of the limit: {r.worst_line}")
    assert r.status == "pass", (f"{check.name} ({r.status}) on {device} {check.dtype or cand.dtype_name}: {r.message}\n"
                                f"shrunk case: {r.shrunk_case}\nrepro: {r.repro}")


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_check_holds_in_float32_on_the_interpreter(check):
    profile = default_profile()
    with kernel_paths.recording() as cov:
        _holds(check, "cpu", torch.float32, profile)
    # the table's claims are the ci draws': a random profile may miss a path by chance
    if profile == "ci":
        missed = kernel_paths.missing(cov, check.name)
        assert not missed, (f"{check.name}: its ci examples no longer reach these kernel paths, which "
                            f"invariants/kernel_paths.py says they reach:\n{kernel_paths.describe(missed)}")


@pytest.mark.gpu
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
def test_check_holds_in_bf16_on_cuda(check):
    """GLMGATE_GPU_EXAMPLES sets the drawn examples per check (default: the `gpu` profile's 40); a record
    that declares one dtype (Check.dtype) runs in it."""
    _holds(check, "cuda", torch.bfloat16, "gpu", int(GPU_EXAMPLES) if GPU_EXAMPLES else None)
