"""My KDA: recurrent token loop and a chunked built on the same loop (boundary states recorded
at the end of every full 64-chunk of each sequence). Written from docs/candidates.md section 3."""
import torch

CHUNK = 64


def _docs(B, T, cu_seqlens):
    """(row, start, end) of each sequence; state row index = position in the list."""
    if cu_seqlens is None:
        return [(b, 0, T) for b in range(B)]
    cu = [int(x) for x in cu_seqlens.tolist()]
    return [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]


def _loop(q, k, v, g, beta, state, cu_seqlens, want_bounds, *, out_before_update=False,
          decay_after=False, drop_tail=False):
    B, T, H, K = q.shape
    V = v.shape[-1]
    docs = _docs(B, T, cu_seqlens)
    qf, kf, vf, gf, bf = q.float(), k.float(), v.float(), g.float(), beta.float()
    o = torch.zeros(B, T, H, V, dtype=torch.float32, device=q.device)
    finals, bounds = [], []
    for n, (b, s, e) in enumerate(docs):
        if state is None:
            M = torch.zeros(H, K, V, dtype=torch.float32, device=q.device)
        else:
            M = state[n].float().clone()
        end = e
        if drop_tail:
            end = s + ((e - s) // CHUNK) * CHUNK
        for t in range(s, end):
            kt, vt, qt, bt = kf[b, t], vf[b, t], qf[b, t], bf[b, t]        # [H,K],[H,V],[H,K],[H]
            if not decay_after:
                M = torch.exp(gf[b, t])[:, :, None] * M
            if out_before_update:
                o[b, t] = torch.einsum("hkv,hk->hv", M, qt)
            r = torch.einsum("hkv,hk->hv", M, kt)
            M = M + kt[:, :, None] * (bt[:, None] * (vt - r))[:, None, :]
            if decay_after:
                M = torch.exp(gf[b, t])[:, :, None] * M
            if not out_before_update:
                o[b, t] = torch.einsum("hkv,hk->hv", M, qt)
            if want_bounds and (t - s + 1) % CHUNK == 0:
                bounds.append(M.clone())
        finals.append(M)
    final = torch.stack(finals)
    bs = None
    if want_bounds:
        if bounds:
            bs = torch.stack(bounds)
        else:
            bs = torch.zeros(0, H, K, V, dtype=torch.float32, device=q.device)
        if cu_seqlens is None:
            bs = bs.reshape(B, T // CHUNK, H, K, V)
    return o.to(q.dtype), final, bs


class KDA:
    @staticmethod
    def recurrent(q, k, v, g, beta, state=None, cu_seqlens=None):
        o, final, _ = _loop(q, k, v, g, beta, state, cu_seqlens, False)
        return o, final

    @staticmethod
    def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        if isinstance(chunk, bool) or chunk != CHUNK:
            raise ValueError(f"chunk: expected 64, got {chunk!r}")
        return _loop(q, k, v, g, beta, state, cu_seqlens, boundary_states)


class Candidate:
    kda = KDA


# ---- buggy copies ----
class KDAOutBefore:
    """bug: o_t read before the correction (after decay only)."""
    @staticmethod
    def recurrent(q, k, v, g, beta, state=None, cu_seqlens=None):
        o, final, _ = _loop(q, k, v, g, beta, state, cu_seqlens, False, out_before_update=True)
        return o, final


class BugOutBefore:
    kda = KDAOutBefore


class KDADecayAfter:
    """bug: decay applied after the correction."""
    @staticmethod
    def recurrent(q, k, v, g, beta, state=None, cu_seqlens=None):
        o, final, _ = _loop(q, k, v, g, beta, state, cu_seqlens, False, decay_after=True)
        return o, final


class BugDecayAfter:
    kda = KDADecayAfter


class KDATailDropped:
    """bug: chunked drops the partial tail chunk of each sequence."""
    @staticmethod
    def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        return _loop(q, k, v, g, beta, state, cu_seqlens, boundary_states, drop_tail=True)


class BugTailDropped:
    kda = KDATailDropped


class KDANoBounds:
    """correct chunked, but no boundary states: declared NOT_PROVIDED (section 10)."""
    NOT_PROVIDED = ("chunked.boundary_states",)

    @staticmethod
    def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        o, final, _ = _loop(q, k, v, g, beta, state, cu_seqlens, False)
        return o, final, None


class NoBounds:
    kda = KDANoBounds


class KDANoBoundsUndeclared:
    """same, without the declaration: the doc says this fails at the first example."""
    @staticmethod
    def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        o, final, _ = _loop(q, k, v, g, beta, state, cu_seqlens, False)
        return o, final, None


class NoBoundsUndeclared:
    kda = KDANoBoundsUndeclared
