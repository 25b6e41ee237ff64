"""The MoE row of the correctness matrix on the Triton implementation (CPU interpreter, float32):
expert ids tie-aware, mixture weights from the raw sigmoid, and the layer output with the SwiGLU
clamps firing; the "gates_off" family (every gate far below -10) also in bfloat16, where it must stay
well-conditioned and still separate a gate clamped from below; the routing families of issue 13 put
the bias, the logits and the ties where the released checkpoint puts them. The oracle's own properties are
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


# ----------------------------------------------------------------------------- adversarial routing (issue 13)
# The routing families must put the data where the released checkpoint puts it (strategies/tensors.py):
# properties of the drawn inputs, as float32 targets see them, and no false alarm on our router.

F32_TORCH = Target(registry.get("torch"), "cpu", torch.float32)


def _keys(case):
    """(w, x, Routing of the float32 torch router): biased keys and group scores as a float32 router has them."""
    from invariants.moe_checks import route_on
    w, x = moe_inputs(case)
    return w, x, route_on(F32_TORCH, w, x)


@pytest.mark.parametrize("seed", range(4))
def test_checkpoint_bias_is_clustered_far_from_zero_with_duplicates_that_bf16_merges(seed):
    w, _ = moe_inputs(MoECase(32, 288, 8, 1, 1, 16, 4, "checkpoint_bias", seed))
    b = w.e_score_correction_bias
    centre = 7.0 if abs(b.mean() - 7.0) < 1 else 11.2
    assert abs(b.mean() - centre) < 0.02 and np.ptp(b) < 0.6
    distinct, in_bf16 = len(np.unique(b)), len(np.unique(torch.as_tensor(b).bfloat16().float().numpy()))
    assert distinct <= 0.85 * len(b)                   # exact duplicates (sglang #30989: 196 of 256 unique)
    assert in_bf16 < distinct / 8                      # bf16 collapses the band (sglang #31213: 238 -> 8)


@pytest.mark.parametrize("case", [MoECase(32, 288, 8, 1, 1, 16, 16, "underflow", s) for s in range(3)]
                         + [MoECase(32, 8, 2, 1, 1, 16, 16, "underflow", 3)], ids=str)
def test_underflow_family_ties_the_float32_keys_bit_for_bit_at_the_top_k_cut(case):
    w, x, r = _keys(case)
    logits = x @ w.router.T
    assert logits.max() < -8 and logits.min() > -87      # far below zero, float32 sigmoid still normal
    assert (r.scores.numpy() > np.finfo(np.float32).tiny).all()
    keys = np.sort(r.biased.numpy(), axis=-1)[:, ::-1]
    k = case.top_k
    assert (keys[:, k - 1] == keys[:, k]).mean() > 0.5, "the k-th and (k+1)-th keys should tie on most tokens"


@pytest.mark.parametrize("case", [MoECase(32, 8, 2, 4, 2, 16, 16, "group_tie", 4),
                                  MoECase(32, 8, 1, 2, 1, 16, 16, "group_tie", 0),
                                  MoECase(32, 256, 8, 8, 4, 16, 16, "group_tie", 1)], ids=str)
def test_group_tie_family_ties_two_float32_group_scores_across_the_topk_group_cut(case):
    _, _, r = _keys(case)
    g = np.sort(r.group_scores.numpy(), axis=-1)[:, ::-1]
    assert (g[:, case.topk_group - 1] == g[:, case.topk_group]).mean() > 0.5


@pytest.mark.parametrize("seed", range(3))
def test_negative_kept_family_keeps_experts_whose_biased_score_is_negative(seed):
    case = MoECase(32, 8, 2, 2, 1, 16, 16, "negative_kept", seed)
    _, _, r = _keys(case)
    chosen = np.take_along_axis(r.biased.numpy(), r.expert_ids.numpy(), -1)
    assert (chosen.min(-1) < 0).all()                  # every token keeps a negative biased score


def test_routing_families_make_no_false_alarm_on_our_router_in_float32_and_bf16():
    from invariants.moe_checks import ROUTE_PINS
    for dtype in (torch.float32, torch.bfloat16):
        base = Target(registry.get("torch"), "cpu", dtype)
        for case in ROUTE_PINS[:4]:
            for v in evaluate(BY_NAME["moe.route"], case, Target(registry.get("triton"), "cpu", dtype), base):
                assert v.ok, describe(v)
