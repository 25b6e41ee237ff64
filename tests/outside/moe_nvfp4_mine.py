"""My fused NVFP4 MoE experts, written from docs/candidates.md sections 7 and 8 only: the NVFP4
experts dequantized in plain torch (per-half gate_up scales, linear or swizzled block scales), W4A4's
activation quant-dequant as the protocol states it. The route and the shared expert are the gate's."""
import torch

BLOCK = 16
GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
MIDS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])


def _linear(t, N, Kb):
    """Block scales [E, N, Kb] float32 from either layout (the tensor's scale_layout says which)."""
    s = t.block_scale
    if getattr(t, "scale_layout", "linear") != "swizzled":
        return s.float()
    Kp = s.shape[-1]
    m = torch.arange(N, device=s.device)[:, None]
    k = torch.arange(Kb, device=s.device)[None, :]
    idx = ((m // 128 * (Kp // 4) + k // 4) * 32 + m % 32) * 16 + ((m // 32) % 4) * 4 + k % 4
    return s.reshape(s.shape[0], -1)[:, idx.reshape(-1)].reshape(s.shape[0], N, Kb).float()


def _values(t):
    """e2m1 · block scale of stacked experts [E, N, K] (no global scale yet)."""
    p = t.packed
    E, N, K = p.shape[0], p.shape[1], 2 * p.shape[2]
    codes = torch.stack([p & 0xF, p >> 4], dim=-1).reshape(E, N, K).long()
    mag = GRID.to(p.device)[codes & 7]
    vals = torch.where(codes >= 8, -mag, mag)
    return vals * _linear(t, N, K // BLOCK).repeat_interleave(BLOCK, dim=-1)


def _gate_up_scales(g):
    """[E] or [E, 2] decode scales -> ([E] gate's, [E] up's)."""
    g = g.float()
    return (g, g) if g.ndim == 1 else (g[:, 0], g[:, 1])


def _gate_scale_both(g):
    """bug variant: the gate's scale for both halves, as a fused w13 loader taking `[:, 0]` does."""
    g = g.float()
    return (g, g) if g.ndim == 1 else (g[:, 0], g[:, 0])


def _dequant_gate_up(t, scales):
    v = _values(t)
    I = v.shape[1] // 2
    gs, us = scales(t.global_decode)
    return torch.cat([v[:, :I] * gs[:, None, None], v[:, I:] * us[:, None, None]], dim=1)


def _fp8(v):
    return v.to(torch.float8_e4m3fn).float()


def _qdq(a, G):
    """W4A4: per row, per 16 along K: s = fp8(min(G · amax / 6, 448)), codes of (a · G) / s, e2m1 · s / G."""
    a = a.float()
    if a.numel() == 0:
        return a
    b = a.reshape(a.shape[0], -1, BLOCK)
    s = _fp8(torch.clamp(G * (b.abs().amax(-1, keepdim=True) / 6), max=448.0))
    v = torch.where(s > 0, (b * G) / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(b))
    mag = v.abs().clamp(max=6.0)
    mids = MIDS.to(a.device)
    code = (mag[..., None] > mids).sum(-1) + ((mag[..., None] == mids) & (torch.arange(1, 8, device=a.device) % 2 == 0)).sum(-1)
    q = GRID.to(a.device)[code] * torch.where(v < 0, -1.0, 1.0)
    return (q * s / G).reshape(a.shape)


def _input_scales(t, acts, E):
    if t.input_global_scale is not None:
        return t.input_global_scale.float()
    amax = acts.abs().amax() if acts.numel() else acts.new_zeros(())
    G = torch.full_like(amax, 2688.0) / amax if amax > 0 else torch.ones((), device=acts.device)
    return G.float().reshape(1).expand(E)


def _experts(w, x, routing, nvfp4=None, w4a4=False, scales=_gate_up_scales):
    if w4a4 and nvfp4 is None:
        raise ValueError("w4a4: needs the NVFP4 experts (nvfp4=...)")
    D, E, k = int(w.router.shape[-1]), int(w.num_experts), int(w.top_k)
    xs = x.reshape(-1, D).float()
    ids, wts = routing.expert_ids, routing.weights
    if tuple(ids.shape) != (xs.shape[0], k):
        raise ValueError(f"routing: expected expert_ids [N, k] = {(xs.shape[0], k)}, got {tuple(ids.shape)}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= E):
        raise ValueError(f"routing.expert_ids: expected ids in [0, {E})")
    if nvfp4 is None:
        gu, dn = w.gate_up_proj.float(), w.down_proj.float()
    else:
        gu = _dequant_gate_up(nvfp4.gate_up, scales)
        dn = _values(nvfp4.down) * nvfp4.down.global_decode.float()[:, None, None]
    I = gu.shape[1] // 2
    L = w.swiglu_limit
    gx = _input_scales(nvfp4.gate_up, xs, E) if w4a4 else None
    rows = []
    for e in range(E):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        a = _qdq(xs[tok], gx[e]) if w4a4 else xs[tok]
        g = a @ gu[e, :I].t()
        u = a @ gu[e, I:].t()
        rows.append((e, tok, slot, torch.nn.functional.silu(g.clamp(max=L)) * u.clamp(-L, L)))
    gh = _input_scales(nvfp4.down, torch.cat([h for *_, h in rows]), E) if w4a4 and rows else None
    y = torch.zeros_like(xs)
    for e, tok, slot, h in rows:
        hq = _qdq(h, gh[e]) if w4a4 else h
        y.index_add_(0, tok, wts[tok, slot, None].float() * (hq @ dn[e].t()))
    return y.to(x.dtype).reshape(x.shape)


class MoE:
    @staticmethod
    def experts(w, x, routing, nvfp4=None, w4a4=False):
        return _experts(w, x, routing, nvfp4, w4a4)


class Candidate:
    moe = MoE


# ---- buggy copy: the fused gate_up takes the gate's global scale for both halves (vLLM #54974) ----
class MoEGateScaleBoth:
    @staticmethod
    def experts(w, x, routing, nvfp4=None, w4a4=False):
        return _experts(w, x, routing, nvfp4, w4a4, scales=_gate_scale_both)


class BugGateScaleBoth:
    moe = MoEGateScaleBoth
