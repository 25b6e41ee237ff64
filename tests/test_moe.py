"""The MoE row of the correctness matrix on the Triton implementation (CPU interpreter, float32):
expert ids tie-aware, mixture weights from the raw sigmoid, and the layer output with the SwiGLU
clamps firing; the "gates_off" family (every gate far below -10) also in bfloat16, where it must stay
well-conditioned and still separate a gate clamped from below. The oracle's own properties are
tests/test_oracle_moe.py; the kernels' edge cases (experts with zero or one token, K off the tile)
tests/test_moe_kernels.py."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from impl import registry
from invariants.matrix import BY_NAME, evaluate
from invariants.moe_checks import MoECase, moe_inputs
from invariants.report import describe
from invariants.target import Target
from oracle.config import Geometry

TINY = Geometry.preset("tiny")



# ----------------------------------------------------------------------------- family "gates_off"
# Every gate below -10: the output is silu's far tail, where a gate clamped from below too (at -10)
# multiplies it several-fold; the inputs are built so a bf16 target holds x and every gate exactly.

GATES_OFF = [MoECase(32, 8, 2, 2, 1, 16, 9, "gates_off", s) for s in range(3)] + \
    [MoECase(48, 8, 3, 4, 2, 16, 17, "gates_off", 7)]


@pytest.mark.parametrize("case", GATES_OFF, ids=str)
def test_gates_off_family_puts_every_gate_below_minus_ten_and_up_at_order_one_to_ten(case):
    w, x = moe_inputs(case)
    I = case.inter
    pre = np.concatenate([x @ w.gate_up_proj[e].T for e in range(case.experts)] + [x @ w.shared_gate_proj.T], 1)
    gates = np.concatenate([pre[:, :-I].reshape(len(x), case.experts, 2 * I)[..., :I].ravel(), pre[:, -I:].ravel()])
    assert -20.0 <= gates.min() and gates.max() <= -11.0, (gates.min(), gates.max())
    ups = np.concatenate([(x @ w.gate_up_proj[e].T)[:, I:].ravel() for e in range(case.experts)]
                         + [(x @ w.shared_up_proj.T).ravel()])
    assert 1.0 < np.sqrt(np.mean(ups ** 2)) < 10.0
    # x[:, 0] and the gate rows are bf16 values, and so is every gate (their product): the baseline's
    # bf16 error, which sets the limit, then never contains a rounded gate (silu's slope there ~e^gate)
    for a in (x[:, 0], w.gate_up_proj[:, :I], w.shared_gate_proj, gates):
        assert np.array_equal(torch.as_tensor(a).to(torch.bfloat16).double().numpy(), a)


@pytest.mark.parametrize("case", GATES_OFF, ids=str)
def test_gates_off_family_is_well_conditioned_in_bf16_and_a_lower_gate_clamp_breaks_it(case):
    base = Target(registry.get("torch"), "cpu", torch.bfloat16)
    ok = evaluate(BY_NAME["moe.forward"], case, Target(registry.get("triton"), "cpu", torch.bfloat16), base)[0]
    # bf16 baselines past ~3e-2 are ill-conditioned; this family measures ~5e-3
    assert ok.baseline_err < 2e-2 and ok.ok, describe(ok)
    bad = evaluate(BY_NAME["moe.forward"], case,
                   Target(registry.get("mutant:moe_two_sided_gate_clamp"), "cpu", torch.bfloat16), base)[0]
    assert bad.value > 10 * bad.limit, describe(bad)
