"""The feed-forward in plain torch, in the working dtype of its inputs: the "torch" baseline (mirrors oracle/moe.py).

Letters: N tokens (every leading axis of x flattened), D hidden size, E routed experts, k experts per
token, G expert groups, I routed expert width, F dense or shared width.

Same names, argument order and return values as `oracle.moe` (torch tensors in and out, a Routing of
torch tensors). Precision is the reference's (SPEC §2, §9.3): the router in float32 (logits,
sigmoid, bias, group scores, top-k, weights; float64 for float64 inputs), the projections and the
clamped SwiGLU in x's dtype, the routed mixture accumulated in float32 and cast to x's dtype. Tie
rule = the oracle's: a stable descending sort, the lowest group / expert id wins.

`TorchMoE` is split into small overridable pieces (`_clamp_gate`, `_selection_bias`, `_mask_dropped`,
`group_scores`, `_picked`, `mixture_weights`) because the planted bugs of impl/mutants/ override exactly
one of them.
`moe = TorchMoE()` and the module-level aliases let this module be used like `oracle.moe`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from oracle.types import DenseMLPWeights, MoEWeights, Routing

NORM_EPS = 1e-20


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for every working dtype except float64, which stays float64 (SPEC §2 "f32")."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def tokens(x, hidden: int) -> torch.Tensor:
    """x [..., D] -> [N, D], raising when the last axis is not D."""
    if x.ndim < 1 or x.shape[-1] != hidden:
        raise ValueError(f"x: expected [..., D] with D={hidden}, got shape {tuple(x.shape)}")
    return x.reshape(-1, hidden)


def top(scores, k: int):
    """[N, M] -> [N, k] int64 indices of the k largest, best first, lowest index first on ties."""
    return torch.argsort(-scores, dim=-1, stable=True)[:, :k]


class TorchMoE:
    """Plain-torch feed-forward; every public method matches the oracle.moe function of the same name."""

    # ------------------------------------------------------------------------- clamped SwiGLU

    def _clamp_gate(self, gate, limit: float):
        """The gate is clamped from ABOVE only (SPEC §9.1)."""
        return gate.clamp(max=limit)

    def swiglu(self, gate, up, limit: float):
        """oracle.moe.swiglu: silu(min(gate, L)) · clip(up, -L, L)."""
        if not limit > 0:
            raise ValueError(f"limit: {limit}, expected > 0 (swiglu_limit)")
        return F.silu(self._clamp_gate(gate, limit)) * up.clamp(-limit, limit)

    def dense_mlp(self, w: DenseMLPWeights, x):
        """oracle.moe.dense_mlp: y [..., D] = act(x Wg^T, x Wu^T) Wd^T in x's dtype."""
        w.validate()
        xs = tokens(x, int(w.gate_proj.shape[-1]))
        dt = x.dtype
        h = self.swiglu(xs @ w.gate_proj.to(dt).T, xs @ w.up_proj.to(dt).T, w.swiglu_limit)
        return (h @ w.down_proj.to(dt).T).reshape(x.shape)

    def shared_expert(self, w: MoEWeights, x):
        """oracle.moe.shared_expert: the dense shared MLP, zeros without one."""
        if w.shared is None:
            return torch.zeros_like(x)
        return self.dense_mlp(w.shared, x)

    # ------------------------------------------------------------------------- routing

    def route(self, w: MoEWeights, x) -> Routing:
        """oracle.moe.route in float32 (float64 for float64 x): a Routing of torch tensors."""
        w.validate()
        acc = compute_dtype(x.dtype)
        xs = tokens(x, int(w.router.shape[-1])).to(acc)                             # [N, D]
        s = torch.sigmoid(xs @ w.router.to(acc).T)                                  # [N, E]
        bias = self._selection_bias(w.e_score_correction_bias, x.dtype, acc)
        biased = s + bias
        groups = self.group_scores(biased, w.n_group)                              # [N, G]
        biased = self._mask_dropped(biased, self.kept_experts(groups, w.topk_group, w.num_experts))
        ids = self._pick(biased, w.top_k)                                           # [N, k]
        weights = self.mixture_weights(self._picked(s, bias, ids), w.norm_topk_prob, w.routed_scaling_factor)
        return Routing(ids, weights, s, biased, groups)

    def _pick(self, biased, k: int):
        """[N, E] -> [N, k] the experts picked: the k best biased scores, lowest id first on exact ties
        (a pure function of the scores: the same tokens route alike on every run)."""
        return top(biased, k)

    def _selection_bias(self, bias, dtype, acc):
        """The correction bias as added to the scores: float32 as stored (SPEC §11), whatever x's dtype."""
        return bias.to(acc)

    def _mask_dropped(self, biased, keep):
        """-inf outside the kept groups: a biased score may be negative, so 0.0 would not lose to it."""
        return torch.where(keep, biased, -torch.inf)

    def group_scores(self, biased, n_group: int):
        """[N, E] -> [N, G]: the sum of the TOP-2 biased scores of each group of E/G contiguous experts."""
        N, E = biased.shape
        per = biased.reshape(N, n_group, E // n_group).topk(2, dim=-1).values          # [N, G, 2]
        return per[..., 0] + per[..., 1]

    def kept_experts(self, groups, topk_group: int, num_experts: int):
        """[N, G] -> [N, E] bool: the expert lies in one of the topk_group best groups."""
        N, G = groups.shape
        keep = torch.zeros(N, G, dtype=torch.bool, device=groups.device)
        keep.scatter_(-1, top(groups, topk_group), True)
        return keep.repeat_interleave(num_experts // G, dim=-1)

    def _picked(self, s, bias, ids):
        """The values the mixture weights are made of: the UN-biased sigmoid of the chosen experts."""
        return torch.gather(s, -1, ids)

    def mixture_weights(self, picked, norm_topk_prob: bool, routed_scaling_factor: float):
        """[N, k] -> w / (Σ w + 1e-20) when norm_topk_prob, THEN x routed_scaling_factor."""
        if norm_topk_prob:
            picked = picked / (picked.sum(dim=-1, keepdim=True) + NORM_EPS)
        return picked * routed_scaling_factor

    # ------------------------------------------------------------------------- experts

    def expert(self, w: MoEWeights, e: int, x):
        """Routed expert e on x [n, D] in x's dtype -> [n, D]."""
        I, dt = w.expert_dim, x.dtype
        gu = x @ w.gate_up_proj[e].to(dt).T                                         # [n, 2I]
        return self.swiglu(gu[:, :I], gu[:, I:], w.swiglu_limit) @ w.down_proj[e].to(dt).T

    def experts(self, w: MoEWeights, x, routing: Routing):
        """oracle.moe.experts: y [..., D] = Σ_{e∈sel} w_e · expert_e(x), accumulated in float32."""
        w.validate()
        xs = tokens(x, int(w.router.shape[-1]))
        ids, wts = routing.expert_ids, routing.weights
        N = xs.shape[0]
        if tuple(ids.shape) != (N, w.top_k) or tuple(wts.shape) != (N, w.top_k):
            raise ValueError(f"routing: expected expert_ids and weights [N, k] = {(N, w.top_k)}, "
                             f"got {tuple(ids.shape)} and {tuple(wts.shape)}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= w.num_experts):
            raise ValueError(f"routing.expert_ids: expected ids in [0, E={w.num_experts}), "
                             f"found [{int(ids.min())}, {int(ids.max())}]")
        acc = compute_dtype(x.dtype)
        y = torch.zeros(N, xs.shape[1], dtype=acc, device=x.device)
        for e in torch.unique(ids).tolist():
            n, slot = self._routed_rows(ids, e, w.num_experts)
            # every expert runs on ALL N tokens and its routed rows are picked after: a GEMM over only the
            # routed rows changes its blocking with their count, so a token's result would depend (in its
            # last bits) on which other tokens chose the same expert: later ones included (model.causal)
            y.index_add_(0, n, wts[n, slot, None].to(acc) * self.expert(w, e, xs)[n].to(acc))
        return y.to(x.dtype).reshape(x.shape)

    def _routed_rows(self, ids, e: int, num_experts: int):
        """(tokens, slots) of the (token, slot) pairs routed to expert e: every one of them (no capacity:
        a token's output never depends on how many others chose its experts)."""
        return torch.nonzero(ids == e, as_tuple=True)

    def forward(self, w: MoEWeights, x):
        """oracle.moe.forward: routed mixture + shared expert."""
        return self.experts(w, x, self.route(w, x)) + self.shared_expert(w, x)


moe = TorchMoE()


def __getattr__(name: str):
    # the module's functions are the namespace's methods (PEP 562): `from impl.baseline.moe import x`
    return getattr(moe, name)
