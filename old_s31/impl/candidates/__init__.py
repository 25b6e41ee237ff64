"""Variants of our own kernels packaged as candidates (`glmgate gate --candidate impl.candidates.<mod>:Candidate
--baseline triton`): an optimization step is gated against the path it would replace before it is timed
(docs/optimization_log.md)."""
from __future__ import annotations

import types


def moe_namespace(module: str, *, route=None, grouped=None, gate_up_fn=None) -> types.SimpleNamespace:
    """A complete moe namespace: ours (impl.moe) with a peer's pieces in place, which is all the MoE peers
    of the optimization steps differ in. route: `impl.moe.route`'s signature; grouped: the grouped GEMMs
    (`impl.moe._grouped`'s signature, float32 out) under experts and the dense MLP (so the shared
    expert); gate_up_fn: the dense MLP's [2F, D] gate-then-up matrix (`impl.moe.gate_up`'s signature).
    forward composes over this namespace. module: the candidate module the namespace is (its functions
    say so in __module__, as if written there)."""
    import torch

    from impl import moe as _moe
    ns = types.SimpleNamespace(**{k: getattr(_moe, k) for k in dir(_moe) if not k.startswith("__")})
    if route is not None:
        ns.route = route
    if grouped is not None:
        def experts(w, x, routing, nvfp4=None, w4a4=False):
            """impl.moe.experts through the peer's grouped GEMMs."""
            return _moe.experts_with(w, x, routing, nvfp4, w4a4, grouped=grouped)
        ns.experts = experts
    if grouped is not None or gate_up_fn is not None:
        def dense_mlp(w, x):
            """impl.moe.dense_mlp through the peer's grouped GEMMs / gate-then-up matrix."""
            return _moe.dense_mlp_with(w, x, grouped=grouped, gate_up_fn=gate_up_fn)

        def shared_expert(w, x):
            """impl.moe.shared_expert through this dense_mlp."""
            return torch.zeros_like(x) if w.shared is None else dense_mlp(w.shared, x)
        ns.dense_mlp, ns.shared_expert = dense_mlp, shared_expert

    def forward(w, x, nvfp4=None, w4a4=False, *, ops=None):
        """impl.moe.forward over this namespace's route, experts and shared expert."""
        return _moe.forward(w, x, nvfp4, w4a4, ops=ns if ops is None else ops)
    ns.forward = forward
    for name in ("experts", "dense_mlp", "shared_expert", "forward"):
        fn = getattr(ns, name)
        if fn.__module__ == __name__:
            fn.__module__ = module
    return ns
