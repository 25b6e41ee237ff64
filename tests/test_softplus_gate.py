"""A softplus-gate geometry (linear_lower_bound None: the config format's other KDA gate, SPEC §6.4), whose
log decays are unbounded below. The tiny preset has the checkpoint's bounded gate, so CI's matrix never
drew this geometry; two defects hid behind that until stop 35, and these tests failed on both:

- ours' chunked prefill returned NaN once a 16-row block's decays fell past float32's e^88 (the intra
  kernel's factorised products; fixed by its exact pairs pass), seen through kda.sublayer;
- model.paths' bf16-persisted continuation held float32 bounds measured on the bounded gate only; under
  weaker decays the persisted state's rounding lives longer (its own cap and gate bounds, model.toml).
"""
from __future__ import annotations

import dataclasses

import torch

from impl import registry
from invariants.engine import run_check
from invariants.matrix import BY_NAME
from invariants.target import Target
from oracle.config import Geometry

SOFTPLUS = dataclasses.replace(Geometry.preset("tiny"), linear_lower_bound=None)
OURS = Target(registry.get("triton"), "cpu", torch.float32)
BASE = Target(registry.get("torch"), "cpu", torch.float32)


def test_the_kda_sublayer_holds_its_contract_under_the_softplus_gate():
    r = run_check(BY_NAME["kda.sublayer"], SOFTPLUS, OURS, BASE, "ci", max_examples=10)
    assert r.status == "pass", r.message


def test_the_core_checks_draw_the_geometrys_gate():
    """kda.chunked's drawn cases carry the geometry's lower bound (None here), not a fixed -5."""
    from hypothesis import given, settings, HealthCheck, Phase
    seen = []

    @settings(max_examples=10, deadline=None, derandomize=True, phases=[Phase.generate], database=None,
              suppress_health_check=list(HealthCheck))
    @given(BY_NAME["kda.chunked"].cases(SOFTPLUS))
    def draw(case):
        seen.append(case.lower_bound)
    draw()
    assert seen and all(lb is None for lb in seen)


def test_the_whole_decoder_holds_its_paths_under_the_softplus_gate():
    # the pin and one drawn case (~24 s and ~10 s on the interpreter; 4 drawn before stop 41, CI's budget)
    r = run_check(BY_NAME["model.paths"], SOFTPLUS, OURS, BASE, "ci", max_examples=1)
    assert r.status == "pass", r.message
