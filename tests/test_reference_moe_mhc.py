"""Cross-check of the float64 MoE and mHC oracles against the published reference (transformers
5.23.0 `Glm5NextTextMoE` with eager experts and `Glm5NextTextHyperConnection`, CPU, float64
parameters; router and mHC coefficients run in float32 there by design): routed expert ids
(tie-aware), mixture weights, the MoE output with the SwiGLU clamps firing, and the mHC
coefficients + collapse with few and many Sinkhorn iterations.

Needs the `reference` extra (`pip install -e .[reference]`, which .ci/run installs).
"""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from invariants.contracts import assert_reference
from oracle import mhc as omhc
from oracle import moe as omoe
from oracle.config import Geometry
from oracle.types import MoEWeights
from strategies import tensors as tz

sys.modules.setdefault("fla", None)
pytest.importorskip("transformers", reason="the reference cross-check needs `pip install -e .[reference]`")
from transformers.models.glm5_next import modeling_glm5_next as ref  # noqa: E402
from transformers.models.glm5_next.configuration_glm5_next import Glm5NextTextConfig  # noqa: E402

TINY = Geometry.preset("tiny")


def _moe_weights(rng, boost):
    E, D, I = TINY.n_routed_experts, TINY.hidden_size, TINY.moe_intermediate_size
    n = rng.standard_normal
    # x40 on std 0.02 so the +-10 SwiGLU clamps fire (SPEC §13)
    s = 0.02 * boost
    return MoEWeights(router=n((E, D)) * D ** -0.5, e_score_correction_bias=0.5 * n(E),
                      gate_up_proj=s * n((E, 2 * I, D)), down_proj=0.02 * n((E, D, I)),
                      shared_gate_proj=s * n((I, D)), shared_up_proj=s * n((I, D)),
                      shared_down_proj=0.02 * n((D, I)), top_k=TINY.num_experts_per_tok, n_group=TINY.n_group,
                      topk_group=TINY.topk_group, norm_topk_prob=TINY.norm_topk_prob,
                      routed_scaling_factor=TINY.routed_scaling_factor, swiglu_limit=TINY.swiglu_limit)


@pytest.mark.parametrize("boost", [1.0, 40.0], ids=["plain", "clamps firing"])
def test_moe_routing_and_output_match_transformers(boost):
    cfg = Glm5NextTextConfig(**TINY.to_dict())
    cfg._experts_implementation = "eager"
    layer = ref.Glm5NextTextMoE(cfg).double()
    rng = np.random.default_rng(int(boost))
    w = _moe_weights(rng, boost)
    layer.load_state_dict({
        "experts.gate_up_proj": torch.tensor(w.gate_up_proj), "experts.down_proj": torch.tensor(w.down_proj),
        "gate.weight": torch.tensor(w.router), "gate.e_score_correction_bias": torch.tensor(w.e_score_correction_bias),
        "shared_experts.gate_proj.weight": torch.tensor(w.shared_gate_proj),
        "shared_experts.up_proj.weight": torch.tensor(w.shared_up_proj),
        "shared_experts.down_proj.weight": torch.tensor(w.shared_down_proj)}, strict=True)
    x = rng.standard_normal((3, 11, TINY.hidden_size))
    with torch.no_grad():
        _, weights_ref, ids_ref = layer.gate(torch.tensor(x))
        y_ref = layer(torch.tensor(x)).numpy()
    r = omoe.route(w, x)
    ids, wts = r.expert_ids.reshape(-1, r.expert_ids.shape[-1]), r.weights.reshape(-1, r.weights.shape[-1])
    mine, ref_w = [], []
    for t in range(ids.shape[0]):
        # the same experts (no ties at the k-th place with these weights) with the same weights
        ours = dict(zip(ids[t].tolist(), wts[t].tolist()))
        theirs = dict(zip(ids_ref[t].tolist(), weights_ref[t].tolist()))
        assert sorted(ours) == sorted(theirs), f"token {t}: expert ids {sorted(ours)} vs {sorted(theirs)}"
        mine.append([ours[e] for e in sorted(ours)])
        ref_w.append([theirs[e] for e in sorted(ours)])
    assert_reference("moe", f"mixture weights (boost {boost:g})", np.array(mine), np.array(ref_w), quantity="weights")
    if boost > 1:
        assert np.abs(x @ w.gate_up_proj[0].T).max() > TINY.swiglu_limit, "the clamps were meant to fire"
    assert_reference("moe", f"MoE output (boost {boost:g})", omoe.forward(w, x), y_ref)


@pytest.mark.parametrize("iters", [1, 3, 20])
def test_mhc_coefficients_and_collapse_match_transformers(iters):
    cfg = Glm5NextTextConfig(**{**TINY.to_dict(), "hc_sinkhorn_iters": iters})
    hc = ref.Glm5NextTextHyperConnection(cfg).double()
    rng = np.random.default_rng(iters)
    w = tz.mhc_weights(rng, TINY.hc_mult, TINY.hidden_size, iters, "boosted", TINY.hc_eps, TINY.rms_norm_eps)
    hc.load_state_dict({"fn": torch.tensor(w.fn), "base": torch.tensor(w.base), "scale": torch.tensor(w.scale)},
                       strict=True)
    X = rng.standard_normal((2, 7, TINY.hc_mult, TINY.hidden_size))
    with torch.no_grad():
        post_ref, comb_ref, u_ref = (a.numpy() for a in hc(torch.tensor(X)))
    pre, post, comb = omhc.coefficients(w, X)
    assert_reference("mhc", f"post (iters {iters})", post, post_ref)
    assert_reference("mhc", f"comb (iters {iters})", comb, comb_ref)
    assert_reference("mhc", f"collapse (iters {iters})", omhc.collapse(pre, X), u_ref)
