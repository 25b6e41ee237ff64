"""Plain containers shared by oracle/ and impl/ (no math here).

Letters: B batch, S tokens of this call, H KDA heads (h), K key dim (d), V value dim (d),
D hidden size, C conv channels (3·H·K), W conv kernel width (linear_conv_kernel_dim).

The same containers hold float64 NumPy arrays on the oracle side and torch tensors on the
implementation side; `map` converts every array field at once.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional

KDA_ARRAYS = (
    "q_proj", "k_proj", "v_proj", "conv1d", "f_a_proj", "f_b_proj", "dt_bias", "A_log",
    "b_proj", "g_a_proj", "g_b_proj", "o_norm", "o_proj",
)


@dataclasses.dataclass(frozen=True)
class KDAWeights:
    """One KDA sublayer's parameters (SPEC §6, §11 names without the `self_attn.` prefix).

    Args:
        q_proj, k_proj, v_proj: [H·K, D]      conv1d: [C, W] (the checkpoint's [C, 1, W] squeezed)
        f_a_proj: [K, D]   f_b_proj: [H·K, K]  dt_bias: [H·K]   A_log: [H]
        b_proj: [H, D]     g_a_proj: [K, D]    g_b_proj: [H·K, K]
        o_norm: [K]        o_proj: [D, H·V]
        lower_bound: the safe-gate bound (-5.0), or None for the softplus gate (SPEC §6.4)
        eps: rms_norm_eps of the gated output norm (SPEC §6.7)
    """

    q_proj: Any
    k_proj: Any
    v_proj: Any
    conv1d: Any
    f_a_proj: Any
    f_b_proj: Any
    dt_bias: Any
    A_log: Any
    b_proj: Any
    g_a_proj: Any
    g_b_proj: Any
    o_norm: Any
    o_proj: Any
    lower_bound: Optional[float] = -5.0
    eps: float = 1e-5

    @property
    def num_heads(self) -> int:
        return int(self.A_log.shape[0])

    @property
    def head_dim(self) -> int:
        return int(self.o_norm.shape[0])

    @property
    def conv_width(self) -> int:
        return int(self.conv1d.shape[-1])

    def map(self, fn: Callable[[Any], Any]) -> "KDAWeights":
        """Apply `fn` to every array field (e.g. to move to torch, a device, a dtype)."""
        return dataclasses.replace(self, **{n: fn(getattr(self, n)) for n in KDA_ARRAYS})

    def validate(self, hidden: Optional[int] = None) -> None:
        """Check every shape against H, K, W (and D if given); raise naming the tensor."""
        H, K, W = self.num_heads, self.head_dim, self.conv_width
        D = hidden if hidden is not None else int(self.q_proj.shape[1])
        want = {
            "q_proj": (H * K, D), "k_proj": (H * K, D), "v_proj": (H * K, D),
            "conv1d": (3 * H * K, W), "f_a_proj": (K, D), "f_b_proj": (H * K, K),
            "dt_bias": (H * K,), "A_log": (H,), "b_proj": (H, D), "g_a_proj": (K, D),
            "g_b_proj": (H * K, K), "o_norm": (K,), "o_proj": (D, H * K),
        }
        for name, shape in want.items():
            got = tuple(getattr(self, name).shape)
            if got != shape:
                raise ValueError(f"KDAWeights.{name}: shape {got}, expected {shape} "
                                 f"(H={H}, K={K}, W={W}, D={D})")
        if self.lower_bound is not None and not self.lower_bound < 0:
            raise ValueError(f"KDAWeights.lower_bound: {self.lower_bound}, expected < 0 or None")


def core_shapes(q, k, v, g, beta, state, cu_seqlens):
    """The KDA core's shape rules (oracle/kda.py docstring), shared by every side.

    Works on anything with `.shape` (NumPy or torch); cu_seqlens may be a list, array or tensor.
    Returns (B, T, H, K, V, n, cu) with n the number of sequences and cu the offsets as a list (or None);
    raises ValueError naming the argument and the expected value.
    """
    if len(q.shape) != 4:
        raise ValueError(f"q: expected [B, T, H, K], got shape {tuple(q.shape)}")
    B, T, H, K = (int(d) for d in q.shape)
    if len(v.shape) != 4:
        raise ValueError(f"v: expected [B, T, H, V], got shape {tuple(v.shape)}")
    V = int(v.shape[-1])
    for name, a, want in (("k", k, (B, T, H, K)), ("v", v, (B, T, H, V)),
                          ("g", g, (B, T, H, K)), ("beta", beta, (B, T, H))):
        if tuple(a.shape) != want:
            raise ValueError(f"{name}: expected shape {want} (from q {tuple(q.shape)}), got {tuple(a.shape)}")
    cu = None
    n = B
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"cu_seqlens given: expected batch 1 (packed), got q batch {B}")
        if len(getattr(cu_seqlens, "shape", (len(cu_seqlens),))) != 1 or len(cu_seqlens) < 2:
            raise ValueError(f"cu_seqlens: expected 1-D [N+1] with N >= 1, got "
                             f"shape {tuple(getattr(cu_seqlens, 'shape', (len(cu_seqlens),)))}")
        cu = [int(c) for c in (cu_seqlens.tolist() if hasattr(cu_seqlens, "tolist") else cu_seqlens)]
        if cu[0] != 0 or cu[-1] != T:
            raise ValueError(f"cu_seqlens: expected to start at 0 and end at T={T}, got {cu}")
        if any(b < a for a, b in zip(cu, cu[1:])):
            raise ValueError(f"cu_seqlens: expected non-decreasing offsets, got {cu}")
        n = len(cu) - 1
    if state is not None and tuple(state.shape) != (n, H, K, V):
        raise ValueError(f"state: expected shape {(n, H, K, V)}, got {tuple(state.shape)}")
    return B, T, H, K, V, n, cu


class KDAState(NamedTuple):
    """Per-sequence KDA cache (SPEC §6.8, §10).

    recurrent: [B, H, K, V] float32 on the implementation side (rows = key channels)
    conv:      [B, C, W] the last W pre-conv inputs z, channel-major
    """

    recurrent: Any
    conv: Any

    def map(self, fn: Callable[[Any], Any]) -> "KDAState":
        return KDAState(fn(self.recurrent), fn(self.conv))


# ------------------------------------------------------------------------- MLA + DSA (SPEC §7, §8, §10)
# Letters: H MLA heads, d_n / d_v per-head q·k / value dims, r_q / r_kv query / KV latent ranks,
# H_i / d_i indexer heads / head dim, P_k pool size, P kept pools, T cached tokens (past + current).

MLA_ARRAYS = (
    "q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj",
    "o_proj",
)
MLA_BIASES = ("q_a_bias", "kv_a_bias", "o_bias")


@dataclasses.dataclass(frozen=True)
class MLAWeights:
    """One MLA sublayer's parameters (SPEC §7, §11 names without the `self_attn.` prefix).

    Args:
        q_a_proj: [r_q, D]    q_a_layernorm: [r_q]    q_b_proj: [H·d_n, r_q]
        kv_a_proj_with_mqa: [r_kv, D]   kv_a_layernorm: [r_kv]
        kv_b_proj: [H·(d_n+d_v), r_kv] (per head: d_n key rows, then d_v value rows)
        o_proj: [D, H·d_v]
        num_heads, nope_dim, v_dim: H, d_n, d_v (d_n alone sets the softmax scale: no rope part)
        eps: rms_norm_eps of q_a_layernorm and kv_a_layernorm
        q_a_bias [r_q], kv_a_bias [r_kv], o_bias [D]: only with attention_bias, else None
    """

    q_a_proj: Any
    q_a_layernorm: Any
    q_b_proj: Any
    kv_a_proj_with_mqa: Any
    kv_a_layernorm: Any
    kv_b_proj: Any
    o_proj: Any
    num_heads: int
    nope_dim: int
    v_dim: int
    eps: float = 1e-5
    q_a_bias: Any = None
    kv_a_bias: Any = None
    o_bias: Any = None

    @property
    def q_rank(self) -> int:
        return int(self.q_a_layernorm.shape[0])

    @property
    def kv_rank(self) -> int:
        return int(self.kv_a_layernorm.shape[0])

    def map(self, fn: Callable[[Any], Any]) -> "MLAWeights":
        """Apply `fn` to every array field (biases only where present)."""
        arrays = {n: fn(getattr(self, n)) for n in MLA_ARRAYS}
        biases = {n: fn(getattr(self, n)) for n in MLA_BIASES if getattr(self, n) is not None}
        return dataclasses.replace(self, **arrays, **biases)

    def validate(self, hidden: Optional[int] = None) -> None:
        """Check every shape against H, d_n, d_v, r_q, r_kv (and D if given); raise naming the tensor."""
        for name in ("num_heads", "nope_dim", "v_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"MLAWeights.{name}: {value!r}, expected a positive int")
        H, dn, dv, rq, rkv = self.num_heads, self.nope_dim, self.v_dim, self.q_rank, self.kv_rank
        D = hidden if hidden is not None else int(self.q_a_proj.shape[-1])
        want = {
            "q_a_proj": (rq, D), "q_a_layernorm": (rq,), "q_b_proj": (H * dn, rq),
            "kv_a_proj_with_mqa": (rkv, D), "kv_a_layernorm": (rkv,),
            "kv_b_proj": (H * (dn + dv), rkv), "o_proj": (D, H * dv),
            "q_a_bias": (rq,), "kv_a_bias": (rkv,), "o_bias": (D,),
        }
        for name, shape in want.items():
            a = getattr(self, name)
            if a is not None and tuple(a.shape) != shape:
                raise ValueError(f"MLAWeights.{name}: shape {tuple(a.shape)}, expected {shape} "
                                 f"(H={H}, d_n={dn}, d_v={dv}, r_q={rq}, r_kv={rkv}, D={D})")


INDEXER_ARRAYS = (
    "wq_b", "wk", "k_norm_weight", "k_norm_bias", "weights_proj", "compress_gate", "compress_ape",
)


@dataclasses.dataclass(frozen=True)
class IndexerWeights:
    """One "full" DSA layer's indexer (SPEC §8, §11 `self_attn.indexer.*`).

    Args:
        wq_b: [H_i·d_i, r_q]   wk: [d_i, D]   k_norm_weight, k_norm_bias: [d_i]
        weights_proj: [H_i, D]   compress_gate: [d_i, D] (index_kpool_compress_gate)
        compress_ape: [P_k, d_i] (index_kpool_compress_ape)
        n_heads, head_dim: H_i, d_i;  topk: index_topk (tokens);  kpool: P_k (index_kpool)
        always_select_tail: index_kpool_always_select_tail
    """

    wq_b: Any
    wk: Any
    k_norm_weight: Any
    k_norm_bias: Any
    weights_proj: Any
    compress_gate: Any
    compress_ape: Any
    n_heads: int
    head_dim: int
    topk: int
    kpool: int
    always_select_tail: bool = True

    @property
    def slots(self) -> int:
        """Selection width per query, topk + P_k - 1 (SPEC §8.7; 2051 at full size)."""
        return self.topk + self.kpool - 1

    @property
    def topk_pools(self) -> int:
        """Most pools one query selects, topk / P_k (k_sel before the min with the kept pools)."""
        return self.topk // self.kpool

    def map(self, fn: Callable[[Any], Any]) -> "IndexerWeights":
        """Apply `fn` to every array field."""
        return dataclasses.replace(self, **{n: fn(getattr(self, n)) for n in INDEXER_ARRAYS})

    def validate(self, hidden: Optional[int] = None, q_rank: Optional[int] = None) -> None:
        """Check the scalars (topk % kpool == 0) and every shape; raise naming the field."""
        for name in ("n_heads", "head_dim", "topk", "kpool"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"IndexerWeights.{name}: {value!r}, expected a positive int")
        if self.topk % self.kpool:
            raise ValueError(f"IndexerWeights.topk: {self.topk}, expected a multiple of "
                             f"kpool={self.kpool} (index_topk % index_kpool == 0)")
        Hi, di, Pk = self.n_heads, self.head_dim, self.kpool
        D = hidden if hidden is not None else int(self.wk.shape[-1])
        rq = q_rank if q_rank is not None else int(self.wq_b.shape[-1])
        want = {
            "wq_b": (Hi * di, rq), "wk": (di, D), "k_norm_weight": (di,), "k_norm_bias": (di,),
            "weights_proj": (Hi, D), "compress_gate": (di, D), "compress_ape": (Pk, di),
        }
        for name, shape in want.items():
            got = tuple(getattr(self, name).shape)
            if got != shape:
                raise ValueError(f"IndexerWeights.{name}: shape {got}, expected {shape} "
                                 f"(H_i={Hi}, d_i={di}, P_k={Pk}, r_q={rq}, D={D})")


class Selection(NamedTuple):
    """One DSA layer's token selection (SPEC §8.3-8.7); what a "shared" layer reuses (§8.8).

    indices:    [B, S, topk + P_k - 1] int64 absolute cache positions, -1 padded; padded queries all -1
    scores:     [B, S, P] the index scores I (SPEC §8.4) of every kept pool; non-candidates -inf
    candidate:  [B, S, P] bool, pool valid and its LAST member visible to the query (§8.5)
    k_sel:      min(topk / P_k, P), one value per forward (§8.6)
    pool_first: [B] the anchor f_b (first real token; T for a row with none) (§8.3)
    kept:       [ceil(T / P_k)] bool, which pools were valid in at least one batch row (§8.3)
    scale:      [B, S] (oracle only) max over candidate pools of Σ_j |w_j| |qI_j| |K̄_p| / sqrt(d_i), the size
                of the terms the signed head mix cancels and of the dots at the ReLUs' kinks: score rounding
                errors scale with it, not with the score
    """

    indices: Any
    scores: Any
    candidate: Any
    k_sel: int
    pool_first: Any
    kept: Any
    scale: Any = None      # [B, S] the oracle's score magnitude per query: max over candidate pools of
                           # Σ_j |w_j| |qI_j| |K̄_p| / sqrt(d_i) (what score rounding scales with); None elsewhere

    def map(self, fn: Callable[[Any], Any]) -> "Selection":
        """Apply `fn` to every array field (k_sel stays an int)."""
        return Selection(fn(self.indices), fn(self.scores), fn(self.candidate), self.k_sel,
                         fn(self.pool_first), fn(self.kept), None if self.scale is None else fn(self.scale))


class DSACache(NamedTuple):
    """Per-layer DSA cache (SPEC §10 `DynamicIndexedLayer`), both grown by appending rows.

    latent:     [B, T, r_kv] the kv_a_layernorm-NORMALIZED latent c (SPEC §7, §12 pitfall 9)
    index_rows: [B, T, 2·d_i + 1] packed (LayerNorm'd index key | gate-score vector | valid flag);
                None on "shared" layers, which have no indexer
    """

    latent: Any
    index_rows: Any

    def map(self, fn: Callable[[Any], Any]) -> "DSACache":
        return DSACache(fn(self.latent), None if self.index_rows is None else fn(self.index_rows))


# ------------------------------------------------------------------------- mHC (SPEC §4)
# Letters: N streams (hc_mult), D hidden size (per stream), M = (2 + N)·N projection rows.

MHC_ARRAYS = ("fn", "base", "scale")


@dataclasses.dataclass(frozen=True)
class MHCWeights:
    """One mHC instance's parameters (SPEC §4, §11 `attn_hc.*` / `ffn_hc.*`) and its scalars.

    Args:
        fn: [(2+N)·N, N·D] projection, rows [pre (N) | post (N) | comb (N·N, row-major m·N + n)]
        base: [(2+N)·N] bias, split like fn's rows;  scale: [3] (pre, post, comb) logit scales
        hc_mult: N;  sinkhorn_iters: hc_sinkhorn_iters (>= 1 column normalizations)
        hc_eps: the pre floor and every Sinkhorn denominator;  rms_eps: rms_norm_eps of the input norm
    """

    fn: Any
    base: Any
    scale: Any
    hc_mult: int = 4
    sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    rms_eps: float = 1e-5

    @property
    def rows(self) -> int:
        """(2 + N)·N."""
        return (2 + self.hc_mult) * self.hc_mult

    @property
    def hidden(self) -> int:
        """D, from fn's N·D columns."""
        return int(self.fn.shape[-1]) // self.hc_mult

    def map(self, fn: Callable[[Any], Any]) -> "MHCWeights":
        """Apply `fn` to every array field (the scalars stay)."""
        return dataclasses.replace(self, **{n: fn(getattr(self, n)) for n in MHC_ARRAYS})

    def validate(self, hidden: Optional[int] = None) -> None:
        """Check the scalars and every shape against N (and D if given); raise naming the field."""
        for name in ("hc_mult", "sinkhorn_iters"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"MHCWeights.{name}: {value!r}, expected a positive int")
        for name in ("hc_eps", "rms_eps"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"MHCWeights.{name}: {value!r}, expected a positive float")
        N = self.hc_mult
        if len(self.fn.shape) != 2 or int(self.fn.shape[1]) % N:
            raise ValueError(f"MHCWeights.fn: shape {tuple(self.fn.shape)}, expected [(2+N)·N, N·D] "
                             f"with N={N}")
        D = hidden if hidden is not None else self.hidden
        want = {"fn": (self.rows, N * D), "base": (self.rows,), "scale": (3,)}
        for name, shape in want.items():
            got = tuple(getattr(self, name).shape)
            if got != shape:
                raise ValueError(f"MHCWeights.{name}: shape {got}, expected {shape} (N={N}, D={D})")


# ------------------------------------------------------------------------- MoE (SPEC §9, §11)
# Letters: E routed experts, I expert width (moe_intermediate_size), F dense or shared width,
# k experts per token (num_experts_per_tok), G expert groups (n_group).

DENSE_ARRAYS = ("gate_proj", "up_proj", "down_proj")
MOE_ARRAYS = ("router", "e_score_correction_bias", "gate_up_proj", "down_proj")
MOE_SHARED = ("shared_gate_proj", "shared_up_proj", "shared_down_proj")


def _positive_int(owner: str, name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{owner}.{name}: {value!r}, expected a positive int")


@dataclasses.dataclass(frozen=True)
class DenseMLPWeights:
    """A clamped-SwiGLU MLP: the dense layers' `mlp` and the MoE shared expert (SPEC §9.1, §9.2).

    Args:
        gate_proj, up_proj: [F, D]   down_proj: [D, F]
        swiglu_limit: L of the clamps (10.0)
    """

    gate_proj: Any
    up_proj: Any
    down_proj: Any
    swiglu_limit: float = 10.0

    @property
    def width(self) -> int:
        return int(self.gate_proj.shape[0])

    def map(self, fn: Callable[[Any], Any]) -> "DenseMLPWeights":
        """Apply `fn` to every array field."""
        return dataclasses.replace(self, **{n: fn(getattr(self, n)) for n in DENSE_ARRAYS})

    def validate(self, hidden: Optional[int] = None) -> None:
        """Check every shape against F (and D if given) and L > 0; raise naming the field."""
        F = self.width
        D = hidden if hidden is not None else int(self.gate_proj.shape[-1])
        want = {"gate_proj": (F, D), "up_proj": (F, D), "down_proj": (D, F)}
        for name, shape in want.items():
            got = tuple(getattr(self, name).shape)
            if got != shape:
                raise ValueError(f"DenseMLPWeights.{name}: shape {got}, expected {shape} (F={F}, D={D})")
        if not self.swiglu_limit > 0:
            raise ValueError(f"DenseMLPWeights.swiglu_limit: {self.swiglu_limit}, expected > 0")


@dataclasses.dataclass(frozen=True)
class MoEWeights:
    """One MoE `mlp` (SPEC §9.3, §11 names without the `mlp.` prefix).

    Args:
        router: [E, D] (`gate.weight`)   e_score_correction_bias: [E] (selection only)
        gate_up_proj: [E, 2I, D] (rows 0..I-1 gate, I..2I-1 up)   down_proj: [E, D, I]
        shared_gate_proj, shared_up_proj: [F, D]   shared_down_proj: [D, F], F = I·n_shared_experts;
            all three None when n_shared_experts = 0
        top_k: k_e (num_experts_per_tok);  n_group, topk_group: group-limited routing
        norm_topk_prob: renormalize the k weights;  routed_scaling_factor: x after renormalizing
        swiglu_limit: L of the clamps, shared by routed and shared experts
        nvfp4: None, or the NVFP4 routed experts behind gate_up_proj / down_proj (NVFP4.md A5)
    """

    router: Any
    e_score_correction_bias: Any
    gate_up_proj: Any
    down_proj: Any
    shared_gate_proj: Any
    shared_up_proj: Any
    shared_down_proj: Any
    top_k: int
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 2.5
    swiglu_limit: float = 10.0
    # the routed experts as read from an NVFP4 checkpoint (NVFP4ExpertWeights on the oracle side,
    # impl.nvfp4.NVFP4Experts on the impl side); gate_up_proj / down_proj then hold their exact
    # dequantization. `map` leaves it alone: its codes and fp8 scales must never be cast.
    nvfp4: Any = None

    @property
    def num_experts(self) -> int:
        return int(self.router.shape[0])

    @property
    def expert_dim(self) -> int:
        """I, half the rows of gate_up_proj."""
        return int(self.gate_up_proj.shape[1]) // 2

    @property
    def shared(self) -> Optional[DenseMLPWeights]:
        """The shared expert as a dense MLP, or None without one."""
        if self.shared_gate_proj is None:
            return None
        return DenseMLPWeights(self.shared_gate_proj, self.shared_up_proj, self.shared_down_proj,
                               self.swiglu_limit)

    def map(self, fn: Callable[[Any], Any]) -> "MoEWeights":
        """Apply `fn` to every array field (the shared expert's only where present)."""
        arrays = {n: fn(getattr(self, n)) for n in MOE_ARRAYS}
        shared = {n: fn(getattr(self, n)) for n in MOE_SHARED if getattr(self, n) is not None}
        return dataclasses.replace(self, **arrays, **shared)

    def validate(self, hidden: Optional[int] = None) -> None:
        """Check the routing scalars (SPEC §13 constraints) and every shape; raise naming the field."""
        for name in ("top_k", "n_group", "topk_group"):
            _positive_int("MoEWeights", name, getattr(self, name))
        E, I, G = self.num_experts, self.expert_dim, self.n_group
        if E % G:
            raise ValueError(f"MoEWeights.n_group: {G} does not divide E={E} (n_routed_experts % n_group == 0)")
        if E // G < 2:
            raise ValueError(f"MoEWeights.n_group: {G} leaves {E // G} expert per group, expected >= 2 "
                             f"(the group score sums the top 2)")
        if self.topk_group > G:
            raise ValueError(f"MoEWeights.topk_group: {self.topk_group}, expected <= n_group={G}")
        if self.top_k > self.topk_group * (E // G):
            raise ValueError(f"MoEWeights.top_k: {self.top_k}, expected <= topk_group·E/n_group = "
                             f"{self.topk_group * (E // G)}")
        for name in ("routed_scaling_factor", "swiglu_limit"):
            if not getattr(self, name) > 0:
                raise ValueError(f"MoEWeights.{name}: {getattr(self, name)}, expected > 0")
        D = hidden if hidden is not None else int(self.router.shape[-1])
        want = {"router": (E, D), "e_score_correction_bias": (E,), "gate_up_proj": (E, 2 * I, D),
                "down_proj": (E, D, I)}
        for name, shape in want.items():
            got = tuple(getattr(self, name).shape)
            if got != shape:
                raise ValueError(f"MoEWeights.{name}: shape {got}, expected {shape} (E={E}, I={I}, D={D})")
        present = [getattr(self, n) is not None for n in MOE_SHARED]
        if any(present) and not all(present):
            raise ValueError(f"MoEWeights.{MOE_SHARED[present.index(False)]}: None while another shared "
                             f"expert tensor is set, expected all three or none")
        if all(present):
            F = int(self.shared_gate_proj.shape[0])
            for name, shape in zip(MOE_SHARED, ((F, D), (F, D), (D, F))):
                got = tuple(getattr(self, name).shape)
                if got != shape:
                    raise ValueError(f"MoEWeights.{name}: shape {got}, expected {shape} (F={F}, D={D})")


class Routing(NamedTuple):
    """One MoE layer's routing decision for N tokens (SPEC §9.3).

    expert_ids:   [N, k] int64 chosen experts, best biased score first (ties: lowest id first)
    weights:      [N, k] mixture weights from the UN-biased sigmoid (renormalized, then scaled)
    scores:       [N, E] the raw sigmoid s
    biased:       [N, E] selection scores s + e_score_correction_bias, -inf outside the kept groups
    group_scores: [N, G] sum of the top-2 biased scores of each group
    """

    expert_ids: Any
    weights: Any
    scores: Any
    biased: Any
    group_scores: Any

    def map(self, fn: Callable[[Any], Any]) -> "Routing":
        return Routing(*(fn(a) for a in self))


# ------------------------------------------------------------------------- NVFP4 (NVFP4.md A1-A5)
# Letters: N output rows, K reduction dim (packed K/2 bytes, K/16 block scales).


class NVFP4Tensor(NamedTuple):
    """One NVFP4 weight [N, K] as a kernel receives it (NVFP4.md A1, A4).

    packed:             uint8 [N, K/2], element 2j in the low nibble, 2j+1 in the high nibble
    block_scale:        float8_e4m3fn [N, K/16] LINEAR row-major (never the 128x4 swizzled layout)
    global_decode:      float32 scalar, DECODE direction (ModelOpt weight_scale_2 = 1 / weight_global_scale)
    input_global_scale: float32 scalar, ENCODE direction (compressed-tensors input_global_scale), W4A4 only;
                        None for weight-only (W4A16)
    """

    packed: Any
    block_scale: Any
    global_decode: Any
    input_global_scale: Any = None

    @property
    def shape(self) -> tuple[int, int]:
        """(N, K) of the dequantized weight."""
        return int(self.packed.shape[0]), 2 * int(self.packed.shape[1])

    def map(self, fn: Callable[[Any], Any]) -> "NVFP4Tensor":
        """Apply `fn` to every array field (input_global_scale only where present)."""
        g_in = None if self.input_global_scale is None else fn(self.input_global_scale)
        return NVFP4Tensor(fn(self.packed), fn(self.block_scale), fn(self.global_decode), g_in)


class NVFP4ExpertWeights(NamedTuple):
    """One MoE layer's routed experts as an NVFP4 checkpoint stores them (NVFP4.md A5, SPEC §11).

    gate, up: NVFP4Tensor stacked over E (NumPy): packed uint8 [E, I, D/2], block_scale float8_e4m3fn
              [E, I, D/16] (linear), global_decode float32 [E] (DECODE), input_global_scale float32
              [E] (ENCODE) or None
    down:     the same for down_proj: [E, D, I/2], [E, D, I/16], [E], [E] or None
    layout:   "compressed-tensors" or "modelopt" (where it was read from; the values are the same)
    Gate and up stay apart because each has its own global scale on disk.
    """

    gate: NVFP4Tensor
    up: NVFP4Tensor
    down: NVFP4Tensor
    layout: str

    def gate_up(self) -> NVFP4Tensor:
        """gate rows then up rows ([E, 2I, D/2], [E, 2I, D/16]) with one global scale per expert, as
        fused w13 kernels take it; ValueError when gate's and up's global or input scales differ."""
        import numpy as np  # the containers stay math-free; this is a concatenation only

        for field in ("global_decode", "input_global_scale"):
            a, b = getattr(self.gate, field), getattr(self.up, field)
            if (a is None) != (b is None) or (a is not None and not np.array_equal(a, b)):
                raise ValueError(f"NVFP4ExpertWeights.{field}: gate and up differ, but a fused gate_up "
                                 f"takes one value per expert (NVFP4.md A5: give both halves one scale)")
        return NVFP4Tensor(np.concatenate([self.gate.packed, self.up.packed], axis=1),
                           np.concatenate([self.gate.block_scale, self.up.block_scale], axis=1),
                           self.gate.global_decode, self.gate.input_global_scale)


class LayerDecisions(NamedTuple):
    """The discrete decisions of one decoder layer, to force on the oracle (decision-conditioned checks).

    selection: [B, S, topk + P_k - 1] token indices a full DSA layer attends (-1 padded), or None
    experts:   [B·S, k] expert ids an MoE layer uses per token (rows in (b, s) order), or None
    None fields (and a None LayerDecisions) leave the oracle's own choice.
    """

    selection: Any = None
    experts: Any = None


class LayerTrace(NamedTuple):
    """The oracle's OWN decisions at one layer of a (possibly forced) run, what a forced choice is
    judged against: its Selection (scores, candidates) and its Routing (scores, group scores)."""

    selection: Any = None
    routing: Any = None
