"""My MoE kernels, written from docs/candidates.md section 7 only."""
import torch
from oracle.types import Routing


def _route(w, x, *, bias_in_weights=False, one_sided=True, top1_group=False, scale_before_norm=False):
    D = int(w.router.shape[-1])
    if x.shape[-1] != D:
        raise ValueError(f"x: expected last dim D={D}, got shape {tuple(x.shape)}")
    xs = x.reshape(-1, D).float()
    E, k, G, TG = int(w.router.shape[0]), int(w.top_k), int(w.n_group), int(w.topk_group)
    if k > 8:
        raise ValueError(f"top_k: at most 8 experts per token, got {k}")
    s = torch.sigmoid(xs @ w.router.float().t())                      # [N, E]
    biased = s + w.e_score_correction_bias.float()
    grp = biased.view(-1, G, E // G)
    if top1_group:                                                     # BUG variant
        gs = grp.max(-1).values
    else:
        gs = torch.sort(grp, dim=-1, descending=True).values[..., :2].sum(-1) if E // G >= 2 else grp[..., 0]
    order = torch.sort(gs, dim=-1, descending=True, stable=True).indices[:, :TG]   # ties: lowest group id
    keep = torch.zeros_like(gs, dtype=torch.bool).scatter_(1, order, True)
    keep_e = keep[:, :, None].expand(-1, G, E // G).reshape(-1, E)
    masked = biased.masked_fill(~keep_e, float("-inf"))
    ids = torch.sort(masked, dim=-1, descending=True, stable=True).indices[:, :k]  # ties: lowest id
    src = biased if bias_in_weights else s                             # BUG variant: biased in the mixture
    wts = src.gather(1, ids)
    if scale_before_norm:                                              # BUG variant
        wts = wts * w.routed_scaling_factor
    if w.norm_topk_prob:
        wts = wts / wts.sum(-1, keepdim=True)
    if not scale_before_norm:
        wts = wts * w.routed_scaling_factor
    return Routing(ids.long(), wts.float(), s, masked, gs.float())


def _mlp(x, gate_w, up_w, down_w, L, two_sided=False):
    g = x @ gate_w.float().t()
    u = x @ up_w.float().t()
    if L is not None:
        g = g.clamp(-L, L) if two_sided else g.clamp(max=L)            # BUG variant: two-sided clamp
        u = u.clamp(-L, L)
    return (torch.nn.functional.silu(g) * u) @ down_w.float().t()


def _experts(w, x, routing, nvfp4=None, w4a4=False, two_sided=False):
    if nvfp4 is not None or w4a4:
        raise ValueError("nvfp4: this kernel has no NVFP4 path")
    D, E, k = int(w.router.shape[-1]), int(w.gate_up_proj.shape[0]), int(w.top_k)
    xs = x.reshape(-1, D).float()
    ids, wts = routing.expert_ids, routing.weights
    if tuple(ids.shape) != (xs.shape[0], k):
        raise ValueError(f"routing: expected expert_ids [N, k] = {(xs.shape[0], k)}, got {tuple(ids.shape)}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= E):
        raise ValueError(f"routing.expert_ids: expected ids in [0, {E})")
    I = w.gate_up_proj.shape[1] // 2
    y = torch.zeros_like(xs)
    for e in range(E):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        gu = w.gate_up_proj[e]
        h = _mlp(xs[tok], gu[:I], gu[I:], w.down_proj[e], w.swiglu_limit, two_sided)
        y.index_add_(0, tok, h * wts[tok, slot].float()[:, None])
    return y.to(x.dtype).reshape(x.shape)


def _shared(w, x):
    D = int(w.router.shape[-1])
    if w.shared_gate_proj is None:
        return torch.zeros_like(x)
    xs = x.reshape(-1, D).float()
    y = _mlp(xs, w.shared_gate_proj, w.shared_up_proj, w.shared_down_proj, w.swiglu_limit)
    return y.to(x.dtype).reshape(x.shape)


# ---- correct candidates
class Route:          # route only
    route = staticmethod(_route)

class Experts:        # experts + shared_expert (positional nvfp4, w4a4 as the doc asks)
    @staticmethod
    def experts(w, x, routing, nvfp4=None, w4a4=False):
        return _experts(w, x, routing, nvfp4, w4a4)
    shared_expert = staticmethod(_shared)

class RouteOnly:
    moe = Route

class ExpertsOnly:
    moe = Experts

class All:            # route + experts + shared (forward from the fallback)
    class moe:
        route = staticmethod(_route)
        experts = Experts.experts
        shared_expert = staticmethod(_shared)

# ---- buggy copies
class BiasInWeights:
    class moe:
        route = staticmethod(lambda w, x: _route(w, x, bias_in_weights=True))

class Top1Group:
    class moe:
        route = staticmethod(lambda w, x: _route(w, x, top1_group=True))

class ScaleBeforeNorm:
    class moe:
        route = staticmethod(lambda w, x: _route(w, x, scale_before_norm=True))

class TwoSidedClamp:
    class moe:
        @staticmethod
        def experts(w, x, routing, nvfp4=None, w4a4=False):
            return _experts(w, x, routing, nvfp4, w4a4, two_sided=True)
        shared_expert = staticmethod(_shared)


class BF16Only:       # same experts, signature without a w4a4 parameter (to opt out of nvfp4.gate)
    class moe:
        @staticmethod
        def experts(w, x, routing):
            return _experts(w, x, routing)
        shared_expert = staticmethod(_shared)


class RouteWritesInput:   # right routing, but x is left scaled in place (the caller's hidden states change)
    class moe:
        @staticmethod
        def route(w, x):
            r = _route(w, x)
            x.mul_(0.5)
            return r


class ExpertsOutputInInput:   # the mixture written over x's buffer (the output aliases an input)
    class moe:
        @staticmethod
        def experts(w, x, routing, nvfp4=None, w4a4=False):
            return x.copy_(_experts(w, x, routing, nvfp4, w4a4))
        shared_expert = staticmethod(_shared)
