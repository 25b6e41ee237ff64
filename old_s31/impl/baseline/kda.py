"""KDA in plain torch, in the working dtype of its inputs: the "torch" baseline (mirrors oracle/kda.py).

Letters: B batch, T tokens, N documents (cu_seqlens), H heads, K key dim, V value dim,
D hidden size, C conv channels (3·H·K), W conv width, L chunk length, P chunk boundaries.

Same names, argument order and return values as `oracle.kda`; the math is the oracle's, the
precision is the reference's (SPEC §2): projections and o_proj in the input dtype, the conv in the
conv-weight dtype, the gate, the L2 norms, the whole core and the gated norm in float32, the
recurrent state float32, every output cast back to the input dtype. "float32" means "at least
float32": float64 inputs run everything in float64, which is how this file is checked against the
oracle to 1e-10.

`TorchKDA` is split into small overridable pieces because the planted bugs of impl/mutants/
subclass it and override exactly one of them (`_step`, `_documents`, `_chunks`, `conv`, ...).
`kda = TorchKDA()` and the module-level aliases let this module be used like `oracle.kda`.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from impl.graph import KDADecodeStep, capturing
from oracle.state import checkpoint_shapes
from oracle.types import KDAState, KDAWeights, core_shapes

L2_EPS = 1e-6
# the factorised decay products e^Γ · e^-Γ stay finite while -Γ is below this (per compute dtype)
_EXP_SAFE = {torch.float64: 700.0, torch.float32: 60.0}


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for every working dtype except float64, which stays float64 (SPEC §2 "f32")."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# ----------------------------------------------------------------------------- validation


def offsets(cu_seqlens) -> list[int]:
    """cu_seqlens (list, NumPy array or tensor on any device) as a list of Python ints."""
    if isinstance(cu_seqlens, torch.Tensor):
        cu_seqlens = cu_seqlens.detach().cpu().numpy()
    cu = np.asarray(cu_seqlens)
    if cu.ndim != 1 or cu.shape[0] < 2:
        raise ValueError(f"cu_seqlens: expected 1-D [N+1] with N >= 1, got shape {tuple(cu.shape)}")
    return [int(c) for c in cu]


def check_core_inputs(q, k, v, g, beta, state, cu_seqlens):
    """Shapes (oracle.types.core_shapes) and NaN-free gates, as the oracle: returns (B, T, H, K, V, n)."""
    B, T, H, K, V, n, _ = core_shapes(q, k, v, g, beta, state, cu_seqlens)
    if capturing():
        # a CUDA-graph capture reads no value back (impl/graph.py): the eager call of the step refuses NaN
        return B, T, H, K, V, n
    # as the oracle: a NaN gate is refused; NaN in q/k/v/state propagates inside its document
    for name, a in (("g", g), ("beta", beta)):
        if torch.isnan(a).any():
            raise ValueError(f"{name}: contains NaN (a gate must be finite; NaN may only poison q/k/v/state)")
    return B, T, H, K, V, n


def check_chunk(chunk) -> None:
    if not isinstance(chunk, (int, np.integer)) or isinstance(chunk, bool) or chunk < 1:
        raise ValueError(f"chunk: expected a positive integer, got {chunk!r}")


def spans(T: int, B: int, cu_seqlens) -> list[tuple[int, int, int]]:
    """(batch row, start, end) of every independent sequence (oracle.kda._documents)."""
    if cu_seqlens is None:
        return [(b, 0, T) for b in range(B)]
    cu = offsets(cu_seqlens)
    return [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]


def each_document(seqs, initial, zero, run) -> torch.Tensor:
    """run(b, start, end, state0) -> state for every sequence, each from its own initial row."""
    finals = []
    for i, (b, s, e) in enumerate(seqs):
        state0 = zero if initial is None else initial[i].to(zero.dtype)
        finals.append(run(b, s, e, state0))
    return torch.stack(finals)


def _decay_products(a, b, G):
    """P[h,i,j] = Σ_c a_i[c] b_j[c] e^{Γ_i[c]-Γ_j[c]} for j <= i (upper triangle is garbage).

    Factorised while e^±Γ stays finite in the compute dtype, else the [H,L,L,K] difference form.
    """
    if -float(G.min()) < _EXP_SAFE[G.dtype]:
        return (a * torch.exp(G)) @ (b * torch.exp(-G)).transpose(1, 2)
    diff = (G[:, :, None, :] - G[:, None, :, :]).clamp(max=0.0)            # [H, L, L, K]
    return torch.einsum("hic,hjc,hijc->hij", a, b, torch.exp(diff))


# ----------------------------------------------------------------------------- the implementation


class TorchKDA:
    """Plain-torch KDA; every public method matches the oracle.kda function of the same name."""

    # bitwise batch invariance (impl.registry.batch_invariant): the core runs each row and each document
    # through the same ops of the same shapes as alone; decode convolves all rows in one conv1d
    BATCH_INVARIANT = ("chunked", "recurrent")

    # ------------------------------------------------------------------------- core: recurrence

    def recurrent(self, q, k, v, g, beta, state=None, cu_seqlens=None):
        """oracle.kda.recurrent: o [B,T,H,V] (q's dtype), state [B or N,H,K,V] (float32)."""
        B, T, H, K, V, n = check_core_inputs(q, k, v, g, beta, state, cu_seqlens)
        acc = compute_dtype(q.dtype)
        qf, kf, vf, gf, bf = (a.to(acc) for a in (q, k, v, g, beta))
        o = torch.zeros(B, T, H, V, dtype=acc, device=q.device)

        def run(b, s, e, M):
            for t in range(s, e):
                o[b, t], M = self._step(M, qf[b, t], kf[b, t], vf[b, t], gf[b, t], bf[b, t])
            return M

        zero = torch.zeros(H, K, V, dtype=acc, device=q.device)
        final = self._documents(spans(T, B, cu_seqlens), state, zero, run)
        return o.to(q.dtype), final

    def _step(self, M, q_t, k_t, v_t, g_t, beta_t):
        """One token, all heads: M [H,K,V], q_t k_t g_t [H,K], v_t [H,V], beta_t [H] -> (o_t [H,V], M)."""
        M = torch.exp(g_t)[..., None] * M                                  # decay rows first
        r = torch.einsum("hkv,hk->hv", M, k_t)                             # predict with the decayed state
        delta = beta_t[:, None] * (v_t - r)
        M = M + k_t[..., None] * delta[:, None, :]
        return torch.einsum("hkv,hk->hv", M, q_t), M                       # read after the update

    def _documents(self, seqs, state, zero, run):
        """Recurrent state over documents: each starts from its own row of `state` (or zero)."""
        return each_document(seqs, state, zero, run)

    # ------------------------------------------------------------------------- core: chunked

    def chunked(self, q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        """oracle.kda.chunked: (o, state, boundary_states), boundary_states None when not asked for.

        Returns:
            o: [B, T, H, V] in q's dtype;  state: [B or N, H, K, V] float32
            boundary_states: [B, T // L, H, K, V], or [Σ_n len_n // L, H, K, V] with cu_seqlens
        """
        check_chunk(chunk)
        B, T, H, K, V, n = check_core_inputs(q, k, v, g, beta, state, cu_seqlens)
        acc = compute_dtype(q.dtype)
        qf, kf, vf, gf, bf = (a.to(acc) for a in (q, k, v, g, beta))
        o = torch.zeros(B, T, H, V, dtype=acc, device=q.device)
        bounds = []

        def run(b, s, e, M):
            sl = slice(s, e)
            o[b, sl], M, per_doc = self._chunked_document(qf[b, sl], kf[b, sl], vf[b, sl], gf[b, sl],
                                                          bf[b, sl], M, chunk)
            bounds.append(per_doc)
            return M

        zero = torch.zeros(H, K, V, dtype=acc, device=q.device)
        final = self._documents(spans(T, B, cu_seqlens), state, zero, run)
        if not boundary_states:
            return o.to(q.dtype), final, None
        flat = [M for doc in bounds for M in doc]
        boundary = torch.stack(flat) if flat else zero.new_zeros(0, H, K, V)
        if cu_seqlens is None:
            boundary = boundary.reshape(B, T // chunk, H, K, V)
        return o.to(q.dtype), final, boundary

    def checkpoint(self, q, k, v, g, beta, boundary_states, state=None, depth=0, chunk=64):
        """oracle.kda.checkpoint: the state [B, H, K, V] (float32) after exactly `depth` tokens, from the
        saved boundary state at or below depth (`_saved`) and the tokens after it replayed."""
        B, _, H, K, V = checkpoint_shapes(q, k, v, g, beta, boundary_states, state, depth, chunk)
        zero = torch.zeros(B, H, K, V, dtype=torch.float32, device=q.device)
        saved, at = self._saved(boundary_states, zero if state is None else state, depth, chunk)
        if at == depth:
            return saved.clone()
        return self.chunked(*(a[:, at:depth] for a in (q, k, v, g, beta)), saved, chunk, boundary_states=False)[1]

    def _saved(self, boundary_states, state, depth, chunk):
        """(the state saved at the deepest chunk boundary at or below depth, that boundary's depth);
        state: the prefill's initial state (zeros when it had none)."""
        at = depth // chunk * chunk
        return (boundary_states[:, at // chunk - 1] if at else state).float(), at

    def _chunked_document(self, q, k, v, g, beta, M, chunk):
        """One sequence [n, H, *] -> (o [n,H,V], M, states after tokens L, 2L, ... <= n)."""
        n, pos, bounds = q.shape[0], 0, []
        o = v.new_zeros(v.shape)
        for piece in self._chunks(q, k, v, g, beta, chunk):
            o_c, M = self._chunk_step(*piece, M)
            m = max(0, min(o_c.shape[0], n - pos))                         # pads past n are not outputs
            o[pos:pos + m] = o_c[:m]
            pos += o_c.shape[0]
            if pos % chunk == 0 and pos <= n:
                bounds.append(M)
        return o, M, bounds

    def _chunks(self, q, k, v, g, beta, chunk):
        """Split one sequence's inputs into consecutive chunks; the trailing partial one is shorter."""
        n = q.shape[0]
        return [tuple(a[c0:c0 + chunk] for a in (q, k, v, g, beta)) for c0 in range(0, n, chunk)]

    def _chunk_step(self, q, k, v, g, beta, M):
        """One chunk, all heads: q,k,g [L,H,K], v [L,H,V], beta [L,H], M [H,K,V] -> (o [L,H,V], M)."""
        q, k, v, g = (a.transpose(0, 1) for a in (q, k, v, g))             # [H, L, *]
        beta = beta.T[..., None]                                           # [H, L, 1]
        L = q.shape[1]
        G = torch.cumsum(g, dim=1)                                         # [H, L, K]
        ones = torch.ones(L, L, dtype=torch.bool, device=q.device)
        zero = q.new_zeros(())
        # where(), not a 0/1 product: the unused upper triangle may hold inf
        A = torch.where(ones.tril(-1), beta * _decay_products(k, k, G), zero)   # [H, L, L]
        eye = torch.eye(L, dtype=q.dtype, device=q.device)
        rhs = torch.cat([beta * v, beta * k * torch.exp(G)], dim=-1)
        TU = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
        U, Wm = TU[..., :v.shape[-1]], TU[..., v.shape[-1]:]               # [H,L,V], [H,L,K]
        Vn = U - Wm @ M                                                    # [H, L, V]
        Aqk = torch.where(ones.tril(), _decay_products(q, k, G), zero)    # [H, L, L]
        o = (q * torch.exp(G)) @ M + Aqk @ Vn
        G_last = G[:, -1:, :]                                              # [H, 1, K]
        M = torch.exp(G_last[:, 0, :])[..., None] * M + (k * torch.exp(G_last - G)).transpose(1, 2) @ Vn
        return o.transpose(0, 1), M

    # ------------------------------------------------------------------------- sublayer pieces

    def l2norm(self, x):
        """x / sqrt(Σ x² + 1e-6) over the last axis, in float32 (eps inside the sqrt, SPEC §2)."""
        x = x.to(compute_dtype(x.dtype))
        return x / torch.sqrt(torch.sum(x * x, dim=-1, keepdim=True) + L2_EPS)

    def _qk_norm(self, q, k):
        """q <- L2N(q)·K^-1/2, k <- L2N(k) (SPEC §6.6)."""
        return self.l2norm(q) * q.shape[-1] ** -0.5, self.l2norm(k)

    def gate(self, f, A_log, lower_bound):
        """Log-decay g [.., H, K] in float32 from f [.., H, K]: bounded form, or softplus if None."""
        acc = compute_dtype(f.dtype)
        f, a = f.to(acc), torch.exp(A_log.to(acc))[:, None]
        if lower_bound is None:
            return -a * F.softplus(f, beta=1.0, threshold=20.0)
        return lower_bound * torch.sigmoid(a * f)

    def conv(self, z, weight, conv_state=None, cu_seqlens=None):
        """oracle.kda.conv: causal depthwise conv (no activation) in the conv-weight dtype.

        Returns:
            c: [B, S, C] in promote(z, weight) dtype;  conv_state: [B or N, C, W] in z's dtype
        """
        B, S, C = z.shape
        W = weight.shape[-1]
        cd = torch.promote_types(z.dtype, weight.dtype)
        wt = weight.to(cd)
        out = torch.zeros(B, S, C, dtype=cd, device=z.device)
        if conv_state is not None and tuple(conv_state.shape[1:]) != (C, W):
            raise ValueError(f"conv_state: expected shape [B or N, {C}, {W}], got {tuple(conv_state.shape)}")

        def run(b, s, e, prev):
            zz = torch.cat([prev.T, z[b, s:e]], dim=0)                     # [W + len, C]
            for j in range(W):
                out[b, s:e] += wt[:, j] * zz[j + 1: j + 1 + (e - s)].to(cd)
            return zz[-W:].T

        new_state = self._conv_documents(spans(S, B, cu_seqlens), conv_state, z.new_zeros(C, W), run)
        return out, new_state

    def _conv_documents(self, seqs, conv_state, zero, run):
        """Conv window over documents: each starts from its own row of `conv_state` (or zero)."""
        return each_document(seqs, conv_state, zero, run)

    def core_inputs(self, w: KDAWeights, c, f, b):
        """oracle.kda.core_inputs: q, k, v [..,H,K], g [..,H,K], beta [..,H], all float32.

        SiLU runs in c's (conv) dtype and is cast to the working dtype (b's) before the core.
        """
        H, K = w.num_heads, w.head_dim
        shape = c.shape[:-1]
        acc = compute_dtype(b.dtype)
        c = F.silu(c).to(b.dtype).to(acc)
        q, k, v = (c[..., i * H * K:(i + 1) * H * K].reshape(*shape, H, K) for i in range(3))
        q, k = self._qk_norm(q, k)
        g = self.gate(f.reshape(*shape, H, K), w.A_log, w.lower_bound)
        beta = torch.sigmoid(b).to(acc)                                    # model dtype (SPEC §6.5)
        return q, k, v, g, beta

    def gated_rmsnorm(self, o, zg, weight, eps):
        """w · o · (mean(o²)+eps)^-1/2 · sigmoid(zg) in float32, cast back to o's dtype (SPEC §2)."""
        acc = compute_dtype(o.dtype)
        u = o.to(acc)
        y = weight.to(acc) * u * torch.rsqrt(torch.mean(u * u, dim=-1, keepdim=True) + eps)
        return (y * self._norm_gate(zg.to(acc))).to(o.dtype)

    def _norm_gate(self, zg):
        """The output norm's gate: sigmoid (SPEC §12.13), not SiLU."""
        return torch.sigmoid(zg)

    def project(self, w: KDAWeights, x):
        """Padding-zeroed x [B,S,D] -> (z [B,S,C], f [B,S,H·K], b [B,S,H], zg [B,S,H·K]), x's dtype.

        f adds dt_bias in its own dtype (float32 when loaded so, SPEC §11).
        """
        def lin(a, W):
            return a @ W.to(x.dtype).T

        z = torch.cat([lin(x, w.q_proj), lin(x, w.k_proj), lin(x, w.v_proj)], dim=-1)
        f = lin(lin(x, w.f_a_proj), w.f_b_proj) + w.dt_bias
        b = lin(x, w.b_proj)
        zg = lin(lin(x, w.g_a_proj), w.g_b_proj)
        return z, f, b, zg

    def sublayer(self, w: KDAWeights, x, state: Optional[KDAState] = None, mask=None, cu_seqlens=None):
        """oracle.kda.sublayer: (y [B,S,D] in x's dtype, KDAState(recurrent f32, conv in x's dtype))."""
        if x.ndim != 3:
            raise ValueError(f"x: expected [B, S, D], got shape {tuple(x.shape)}")
        w.validate(x.shape[-1])
        if mask is not None:
            x = x * torch.as_tensor(mask, device=x.device).to(x.dtype)[..., None]
        B, S, _ = x.shape
        z, f, b, zg = self.project(w, x)
        c, conv_state = self.conv(z, w.conv1d, None if state is None else state.conv, cu_seqlens)
        q, k, v, g, beta = self.core_inputs(w, c, f, b)
        M0 = None if state is None else state.recurrent
        o, M, _ = self.chunked(q, k, v, g, beta, M0, 64, cu_seqlens, boundary_states=False)
        o = self.gated_rmsnorm(o.to(x.dtype), zg.reshape(o.shape), w.o_norm, w.eps)
        y = o.reshape(B, S, -1) @ w.o_proj.to(x.dtype).T
        return y, KDAState(M, conv_state)

    def decode(self, w: KDAWeights, z, f, b, state: KDAState):
        """oracle.kda.decode: one token from projected z [B,C], f [B,H·K], b [B,H].

        Returns:
            o: [B, H, V] core output in z's dtype (before the gated norm);  state: KDAState after it
        """
        c, conv_state = self.conv(z[:, None], w.conv1d, state.conv)
        q, k, v, g, beta = self.core_inputs(w, c, f[:, None], b[:, None])
        o, M = self.recurrent(q, k, v, g, beta, state.recurrent)
        return o[:, 0].to(z.dtype), KDAState(M, conv_state)

    def decode_graph(self, w: KDAWeights, pool: KDAState, max_batch: int):
        """impl.kda.decode_graph over this namespace's `decode`: a KDADecodeStep (impl/graph.py)."""
        return KDADecodeStep(self, w, pool, max_batch)

    def zero_state(self, w: KDAWeights, batch: int, *, dtype=None, device=None) -> KDAState:
        """oracle.kda.zero_state: recurrent float32 (float64 for float64), conv in `dtype`.

        dtype and device default to q_proj's.
        """
        H, K, W = w.num_heads, w.head_dim, w.conv_width
        dtype = w.q_proj.dtype if dtype is None else dtype
        device = w.q_proj.device if device is None else device
        return KDAState(torch.zeros(batch, H, K, K, dtype=compute_dtype(dtype), device=device),
                        torch.zeros(batch, 3 * H * K, W, dtype=dtype, device=device))


kda = TorchKDA()


def __getattr__(name: str):
    # the module's functions are the namespace's methods (PEP 562): `from impl.baseline.kda import x`
    return getattr(kda, name)
