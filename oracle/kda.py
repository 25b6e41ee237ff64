"""KDA (Kimi Delta Attention) in float64 NumPy: the truth the kernels are checked against (SPEC §6).

Letters: B batch, T tokens, N documents (cu_seqlens), H heads, K key dim, V value dim,
D hidden size, C conv channels (3·H·K), W conv width, L chunk length, P chunk boundaries.

Ladder (STYLE 3): `recurrent` is the definition (token loop, explicit state); `chunked` is the
WY/UT rewrite; `sublayer` wraps the core with padding, projections, conv, gates and the output
norm; `decode` is one token of `sublayer` starting from projected inputs (what the fused decode
kernel computes).

Core conventions (fla's layout): q, k [B,T,H,K] already L2-normalised (q also scaled by K^-1/2);
v [B,T,H,V]; g [B,T,H,K] log-decay (<= 0); beta [B,T,H]; state [B,H,K,V] (zeros when None).
With `cu_seqlens` ([N+1], from 0 to T, non-decreasing) B must be 1 and state is [N,H,K,V]: every
document starts from its own state and never sees another's tokens.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import scipy.linalg
import scipy.special

from oracle.state import checkpoint_shapes
from oracle.types import KDAState, KDAWeights, core_shapes

L2_EPS = 1e-6
# exp(+-700) is the edge of float64: beyond it the factorised decay of `_decay_products` overflows
_EXP_SAFE = 700.0


# ----------------------------------------------------------------------------- validation


def _f64(name: str, a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a


def check_core_inputs(q, k, v, g, beta, state, cu_seqlens):
    """Shapes (oracle.types.core_shapes) and NaN-free gates; returns (B, T, H, K, V, n)."""
    B, T, H, K, V, n, _ = core_shapes(q, k, v, g, beta, state, cu_seqlens)
    # a NaN gate is never data: refuse it. NaN in q, k, v or the state is allowed on purpose: it
    # must propagate inside its own document only (the poison tests rely on that)
    for name, a in (("g", g), ("beta", beta)):
        if np.isnan(np.asarray(a, dtype=np.float64)).any():
            raise ValueError(f"{name}: contains NaN (a gate must be finite; NaN may only poison q/k/v/state)")
    return B, T, H, K, V, n


def _documents(T: int, B: int, cu_seqlens) -> list[tuple[int, int, int]]:
    """(batch row, start, end) of every independent sequence."""
    if cu_seqlens is None:
        return [(b, 0, T) for b in range(B)]
    cu = [int(c) for c in cu_seqlens]
    return [(0, cu[i], cu[i + 1]) for i in range(len(cu) - 1)]


# ----------------------------------------------------------------------------- core: recurrence


def recurrent(q, k, v, g, beta, state=None, cu_seqlens=None):
    """The five-step update, token by token (SPEC §6.6).

    Returns:
        o: [B, T, H, V];  state: [B or N, H, K, V] after the last token of each sequence.
    """
    o, final, _ = _recurrent(q, k, v, g, beta, state, cu_seqlens, keep=None)
    return o, final


def recurrent_trajectory(q, k, v, g, beta, state=None, cu_seqlens=None):
    """States after every token: [B, T, H, K, V] (oracle-only helper for boundary checks)."""
    _, _, traj = _recurrent(q, k, v, g, beta, state, cu_seqlens, keep=True)
    return traj


def _recurrent(q, k, v, g, beta, state, cu_seqlens, keep):
    q, k, v, g = (_f64(n, a) for n, a in zip("qkvg", (q, k, v, g)))
    beta = _f64("beta", beta)
    B, T, H, K, V, n = check_core_inputs(q, k, v, g, beta, state, cu_seqlens)
    o = np.zeros((B, T, H, V))
    final = np.zeros((n, H, K, V))
    traj = np.zeros((B, T, H, K, V)) if keep else None
    for i, (b, s, e) in enumerate(_documents(T, B, cu_seqlens)):
        M = np.zeros((H, K, V)) if state is None else _f64("state", state[i]).copy()
        for t in range(s, e):
            M = np.exp(g[b, t])[..., None] * M                         # decay rows first
            r = np.einsum("hkv,hk->hv", M, k[b, t])                    # predict with the decayed state
            delta = beta[b, t][:, None] * (v[b, t] - r)
            M = M + k[b, t][..., None] * delta[:, None, :]
            o[b, t] = np.einsum("hkv,hk->hv", M, q[b, t])              # read after the update
            if keep:
                traj[b, t] = M
        final[i] = M
    return o, final, traj


# ----------------------------------------------------------------------------- core: chunked


def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None):
    """The WY/UT chunk form of the same recurrence for any chunk length (SPEC §6.6).

    Per chunk with Γ = cumsum(g):  A = strict_tril(β_i Σ_c k_i k_j e^{Γ_i-Γ_j}),  T = (I + A)^-1,
    U = T(βv), W = T(βk⊙e^Γ), o = (q⊙e^Γ)M + tril(q_i·(k_j⊙e^{Γ_i-Γ_j}))(U - WM),
    M <- e^{Γ_last} M + (k⊙e^{Γ_last-Γ})^T (U - WM).  A trailing partial chunk is just a shorter
    chunk (no padding).

    Returns:
        o: [B, T, H, V]
        state: [B or N, H, K, V] final states
        boundary_states: the state after every complete chunk of every sequence, i.e. after
            tokens L, 2L, ... floor(len/L)·L of each: [B, P, H, K, V] (P = T // L) without
            cu_seqlens, [sum_n floor(len_n/L), H, K, V] document-major with cu_seqlens.
    """
    if not isinstance(chunk, (int, np.integer)) or isinstance(chunk, bool) or chunk < 1:
        raise ValueError(f"chunk: expected a positive integer, got {chunk!r}")
    q, k, v, g = (_f64(n, a) for n, a in zip("qkvg", (q, k, v, g)))
    beta = _f64("beta", beta)
    B, T, H, K, V, n = check_core_inputs(q, k, v, g, beta, state, cu_seqlens)
    o = np.zeros((B, T, H, V))
    final = np.zeros((n, H, K, V))
    bounds = []
    for i, (b, s, e) in enumerate(_documents(T, B, cu_seqlens)):
        M = np.zeros((H, K, V)) if state is None else _f64("state", state[i]).copy()
        per_doc = []
        for c0 in range(s, e, chunk):
            c1 = min(c0 + chunk, e)
            sl = slice(c0, c1)
            o[b, sl], M = _chunk_step(q[b, sl], k[b, sl], v[b, sl], g[b, sl], beta[b, sl], M)
            if c1 - c0 == chunk:
                per_doc.append(M)
        final[i] = M
        bounds.append(per_doc)
    if cu_seqlens is None:
        P = T // chunk
        boundary = np.zeros((B, P, H, K, V))
        for b in range(B):
            if P:
                boundary[b] = np.stack(bounds[b])
    else:
        flat = [m for doc in bounds for m in doc]
        boundary = np.stack(flat) if flat else np.zeros((0, H, K, V))
    return o, final, boundary


def checkpoint(q, k, v, g, beta, boundary_states, state=None, depth=0, chunk=64):
    """The state after exactly the first `depth` tokens of a prefill, rebuilt from what its chunked pass
    saved: a prefix-cache checkpoint at ANY depth (SERVING.md B2). The saved state at the deepest chunk
    boundary at or below depth (boundary row depth // chunk - 1; the initial state below one chunk),
    then the depth % chunk tokens after that boundary replayed from it.

    Args:
        q, k, v, g, beta: the prefill's inputs [B, T, ...] (batch rows; T >= depth; only the tokens
            between the boundary and depth are read)
        boundary_states: [B, T // chunk, H, K, V] what `chunked` returned for that prefill (None is
            allowed below one chunk)
        state: [B, H, K, V] the prefill's initial state, or None (zeros);  depth: 0 <= depth <= T
    Returns:
        [B, H, K, V]: the state after token `depth`
    """
    B, T, H, K, V = checkpoint_shapes(q, k, v, g, beta, boundary_states, state, depth, chunk)
    at = depth // chunk * chunk
    saved = (_f64("boundary_states", boundary_states)[:, at // chunk - 1] if at else
             np.zeros((B, H, K, V)) if state is None else _f64("state", state))
    if at == depth:
        return saved.copy()
    part = (a[:, at:depth] for a in (q, k, v, g, beta))
    return recurrent(*part, saved)[1]


def _chunk_step(q, k, v, g, beta, M):
    """One chunk for all heads: q,k,g [L,H,K], v [L,H,V], beta [L,H], M [H,K,V] -> (o [L,H,V], M)."""
    q, k, v, g = (np.swapaxes(a, 0, 1) for a in (q, k, v, g))            # [H, L, *]
    beta = beta.T                                                          # [H, L]
    L = q.shape[1]
    G = np.cumsum(g, axis=1)                                               # [H, L, K]
    strict = np.tril(np.ones((L, L), dtype=bool), -1)
    incl = np.tril(np.ones((L, L), dtype=bool))
    A = beta[:, :, None] * _decay_products(k, k, G) * strict               # [H, L, L]
    eye = np.eye(L)
    rhs = np.concatenate([beta[..., None] * v, beta[..., None] * k * np.exp(G)], axis=-1)
    TU = scipy.linalg.solve_triangular(eye + A, rhs, lower=True, unit_diagonal=True)
    U, Wm = TU[..., : v.shape[-1]], TU[..., v.shape[-1]:]                   # [H,L,V], [H,L,K]
    Vn = U - Wm @ M                                                        # [H, L, V]
    Aqk = _decay_products(q, k, G) * incl                                  # [H, L, L]
    o = (q * np.exp(G)) @ M + Aqk @ Vn
    G_last = G[:, -1:, :]                                                  # [H, 1, K]
    M = np.exp(G_last[:, 0, :])[..., None] * M + np.swapaxes(k * np.exp(G_last - G), 1, 2) @ Vn
    return np.swapaxes(o, 0, 1), M


def _decay_products(a, b, G):
    """P[h,i,j] = Σ_c a_i[c] b_j[c] e^{Γ_i[c]-Γ_j[c]} for j <= i (upper triangle is garbage).

    Factorised as (a e^Γ)(b e^-Γ)^T when the range of Γ keeps e^±Γ finite in float64 (always for
    the safe gate: Γ >= -5·L); otherwise the [H,L,L,K] difference form, which never overflows.
    """
    if -G.min(initial=0.0) < _EXP_SAFE:
        return (a * np.exp(G)) @ np.swapaxes(b * np.exp(-G), 1, 2)
    diff = G[:, :, None, :] - G[:, None, :, :]                             # [H, L, L, K]
    diff = np.minimum(diff, 0.0)                                           # j > i entries unused
    return np.einsum("hic,hjc,hijc->hij", a, b, np.exp(diff))


# ----------------------------------------------------------------------------- sublayer pieces


def l2norm(x):
    """x / sqrt(Σ x² + 1e-6) over the last axis: eps inside the sqrt (SPEC §2)."""
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + L2_EPS)


def silu(x):
    return x * scipy.special.expit(x)


def softplus(x):
    """torch's softplus with threshold 20 (u for u > 20)."""
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def gate(f, A_log, lower_bound):
    """Log-decay g [.., H, K] from f [.., H, K] (SPEC §6.4): the bounded form, or softplus if None."""
    a = np.exp(A_log)[:, None]
    if lower_bound is None:
        return -a * softplus(f)
    return lower_bound * scipy.special.expit(a * f)


def conv(z, weight, conv_state=None, cu_seqlens=None):
    """Depthwise causal conv over the concatenated q|k|v channels, no activation (SPEC §6.3, §10).

    Args:
        z: [B, S, C] pre-conv inputs; weight: [C, W] (weight[:, W-1] multiplies the current token)
        conv_state: [B or N, C, W] the last W pre-conv inputs of each sequence (zeros when None)
    Returns:
        c: [B, S, C];  conv_state: [B or N, C, W] = the last W columns of concat(state, z)
    """
    B, S, C = z.shape
    W = weight.shape[-1]
    docs = _documents(S, B, cu_seqlens)
    out = np.zeros_like(z)
    new_state = np.zeros((len(docs), C, W))
    for i, (b, s, e) in enumerate(docs):
        prev = np.zeros((C, W)) if conv_state is None else conv_state[i]
        zz = np.concatenate([prev.T, z[b, s:e]], axis=0)                    # [W + len, C]
        for j in range(W):
            out[b, s:e] += weight[:, j] * zz[j + 1: j + 1 + (e - s)]
        new_state[i] = zz[-W:].T
    return out, new_state


def gated_rmsnorm(o, zg, weight, eps):
    """w · o · (mean(o²)+eps)^-1/2 · sigmoid(zg) over the last axis (SPEC §2, §6.7)."""
    return weight * o / np.sqrt(np.mean(o * o, axis=-1, keepdims=True) + eps) * scipy.special.expit(zg)


def project(w: KDAWeights, x):
    """Padding-zeroed x [B,S,D] -> (z [B,S,C], f [B,S,H·K], b [B,S,H], zg [B,S,H·K]) (SPEC §6.2-6.7)."""
    z = np.concatenate([x @ w.q_proj.T, x @ w.k_proj.T, x @ w.v_proj.T], axis=-1)
    f = (x @ w.f_a_proj.T) @ w.f_b_proj.T + w.dt_bias
    b = x @ w.b_proj.T
    zg = (x @ w.g_a_proj.T) @ w.g_b_proj.T
    return z, f, b, zg


def core_inputs(w: KDAWeights, c, f, b):
    """Post-conv c [..,C], f [..,H·K], b [..,H] -> q, k, v [..,H,K], g [..,H,K], beta [..,H] (SPEC §6.3-6.6)."""
    H, K = w.num_heads, w.head_dim
    shape = c.shape[:-1]
    c = silu(c)
    q, k, v = (c[..., i * H * K:(i + 1) * H * K].reshape(*shape, H, K) for i in range(3))
    q = l2norm(q) * K ** -0.5
    k = l2norm(k)
    g = gate(f.reshape(*shape, H, K), w.A_log, w.lower_bound)
    beta = scipy.special.expit(b)
    return q, k, v, g, beta


def sublayer(w: KDAWeights, x, state: Optional[KDAState] = None, mask=None, cu_seqlens=None, *, hold=None):
    """The KDA sublayer from the post-norm input a to o_proj (SPEC §6.1-6.7, cache protocol §10).

    Args:
        x: [B, S, D];  mask: [B, S] 1 = real, 0 = pad (padded inputs are zeroed first)
        state: KDAState or None (zeros); with cu_seqlens ([N+1]) B is 1 and state rows are documents
        hold: None (exact), or how a working dtype holds the projections' outputs z, b and zg (the held
            reference, invariants.target.HeldOracle: every implementation in that dtype rounds them there,
            and the conv state stores z so)
    Returns:
        y: [B, S, D];  state: KDAState after the last token of each sequence
    """
    x = _f64("x", x)
    if x.ndim != 3:
        raise ValueError(f"x: expected [B, S, D], got shape {tuple(x.shape)}")
    if mask is not None:
        x = x * np.asarray(mask, dtype=np.float64)[..., None]
    B, S, _ = x.shape
    z, f, b, zg = project(w, x)
    if hold is not None:
        z, b, zg = hold(z), hold(b), hold(zg)
    c, conv_state = conv(z, w.conv1d, None if state is None else state.conv, cu_seqlens)
    q, k, v, g, beta = core_inputs(w, c, f, b)
    M0 = None if state is None else state.recurrent
    o, M, _ = chunked(q, k, v, g, beta, M0, 64, cu_seqlens)
    o = gated_rmsnorm(o, zg.reshape(o.shape), w.o_norm, w.eps)
    y = o.reshape(B, S, w.num_heads * w.head_dim) @ w.o_proj.T
    return y, KDAState(M, conv_state)


def decode(w: KDAWeights, z, f, b, state: KDAState):
    """One token per sequence from projected inputs: conv window step, SiLU, L2, gate, beta, delta step.

    Args:
        z: [B, C] pre-conv q|k|v of the new token; f: [B, H·K] gate pre-activation (with dt_bias);
        b: [B, H] beta logits; state: KDAState(recurrent [B,H,K,V], conv [B,C,W])
    Returns:
        o: [B, H, V] core output (before the gated norm); state: the KDAState after the token
    """
    z, f, b = _f64("z", z), _f64("f", f), _f64("b", b)
    c, conv_state = conv(z[:, None], w.conv1d, state.conv)
    q, k, v, g, beta = core_inputs(w, c, f[:, None], b[:, None])
    o, M = recurrent(q, k, v, g, beta, state.recurrent)
    return o[:, 0], KDAState(M, conv_state)


def zero_state(w: KDAWeights, batch: int) -> KDAState:
    H, K = w.num_heads, w.head_dim
    return KDAState(np.zeros((batch, H, K, K)), np.zeros((batch, 3 * H * K, w.conv_width)))


def boundary_positions(lengths: Sequence[int], chunk: int) -> list[tuple[int, int]]:
    """(document, tokens seen) of every row of `chunked`'s boundary_states, in order."""
    return [(d, j * chunk) for d, n in enumerate(lengths) for j in range(1, n // chunk + 1)]
