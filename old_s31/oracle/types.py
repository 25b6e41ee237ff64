"""Plain containers shared by oracle/ and impl/ (no math here).

Letters: B batch, S tokens of this call, H KDA heads (h), K key dim (d), V value dim (d, = K),
D hidden size, C conv channels (3·H·K), W conv kernel width (linear_conv_kernel_dim).

The same containers hold float64 NumPy arrays on the oracle side and torch tensors on the
implementation side. Each weight array is declared once, on its field (oracle/fields.py `weight`:
shape in the section's letters, SPEC §11 on-disk and module names, float32 or not); `map`,
`validate`, `cast_arrays` and the checkpoint name table (oracle/checkpoint_names.py) follow from it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional, Union

from oracle.fields import (EMBED, INERT, NORM, Declared, Parts, cast_arrays, check_positive,  # noqa: F401
                           check_shapes, declared, part, weight)

@dataclasses.dataclass(frozen=True)
class KDAWeights(Declared):
    """One KDA sublayer's parameters (SPEC §6; names under `self_attn.`).

    Args:
        conv1d: the q, k, v short-conv taps concatenated (the checkpoint's [C, 1, W] squeezed)
        lower_bound: the safe-gate bound (-5.0), or None for the softplus gate (SPEC §6.4)
        eps: rms_norm_eps of the gated output norm (SPEC §6.7)
    """

    q_proj: Any = weight("[H·K, D]", "q_proj.weight")
    k_proj: Any = weight("[H·K, D]", "k_proj.weight")
    v_proj: Any = weight("[H·K, D]", "v_proj.weight")
    conv1d: Any = weight("[C, W]", Parts(("q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"), "[H·K, 1, W]"),
                         module="conv1d.weight", squeeze=1, f32=True)
    f_a_proj: Any = weight("[K, D]", "f_a_proj.weight", module="forget_gate.f_a_proj.weight")
    f_b_proj: Any = weight("[H·K, K]", "f_b_proj.weight", module="forget_gate.f_b_proj.weight")
    dt_bias: Any = weight("[H·K]", "dt_bias", module="forget_gate.dt_bias", f32=True)
    A_log: Any = weight("[H]", "A_log", module="forget_gate.A_log", f32=True, init=INERT)
    b_proj: Any = weight("[H, D]", "b_proj.weight")
    g_a_proj: Any = weight("[K, D]", "g_a_proj.weight")
    g_b_proj: Any = weight("[H·K, K]", "g_b_proj.weight")
    o_norm: Any = weight("[K]", "o_norm.weight", init=NORM)
    o_proj: Any = weight("[D, H·V]", "o_proj.weight")
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

    def validate(self, hidden: Optional[int] = None) -> None:
        """Check every shape against H, K, W (and D if given); raise naming the tensor."""
        H, K = self.num_heads, self.head_dim
        D = hidden if hidden is not None else int(self.q_proj.shape[1])
        check_shapes(self, {"H": H, "K": K, "V": K, "C": 3 * H * K, "W": self.conv_width, "D": D})
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

@dataclasses.dataclass(frozen=True)
class MLAWeights(Declared):
    """One MLA sublayer's parameters (SPEC §7; names under `self_attn.`).

    Args:
        kv_b_proj: per head d_n key rows, then d_v value rows
        num_heads, nope_dim, v_dim: H, d_n, d_v (d_n alone sets the softmax scale: no rope part)
        eps: rms_norm_eps of q_a_layernorm and kv_a_layernorm
        q_a_bias, kv_a_bias, o_bias: only with attention_bias, else None
    """

    q_a_proj: Any = weight("[r_q, D]", "q_a_proj.weight")
    q_a_layernorm: Any = weight("[r_q]", "q_a_layernorm.weight", init=NORM)
    q_b_proj: Any = weight("[H·d_n, r_q]", "q_b_proj.weight")
    kv_a_proj_with_mqa: Any = weight("[r_kv, D]", "kv_a_proj_with_mqa.weight")
    kv_a_layernorm: Any = weight("[r_kv]", "kv_a_layernorm.weight", init=NORM)
    kv_b_proj: Any = weight("[H·(d_n+d_v), r_kv]", "kv_b_proj.weight")
    o_proj: Any = weight("[D, H·d_v]", "o_proj.weight")
    num_heads: int
    nope_dim: int
    v_dim: int
    eps: float = 1e-5
    q_a_bias: Any = weight("[r_q]", "q_a_proj.bias", when="attention_bias", default=None)
    kv_a_bias: Any = weight("[r_kv]", "kv_a_proj_with_mqa.bias", when="attention_bias", default=None)
    o_bias: Any = weight("[D]", "o_proj.bias", when="attention_bias", default=None)

    @property
    def q_rank(self) -> int:
        return int(self.q_a_layernorm.shape[0])

    @property
    def kv_rank(self) -> int:
        return int(self.kv_a_layernorm.shape[0])

    def validate(self, hidden: Optional[int] = None) -> None:
        """Check every shape against H, d_n, d_v, r_q, r_kv (and D if given); raise naming the tensor."""
        check_positive(self, ints=("num_heads", "nope_dim", "v_dim"))
        D = hidden if hidden is not None else int(self.q_a_proj.shape[-1])
        check_shapes(self, {"H": self.num_heads, "d_n": self.nope_dim, "d_v": self.v_dim, "r_q": self.q_rank,
                            "r_kv": self.kv_rank, "D": D})


@dataclasses.dataclass(frozen=True)
class IndexerWeights(Declared):
    """One "full" DSA layer's indexer (SPEC §8; names under `self_attn.indexer.`).

    Args:
        n_heads, head_dim: H_i, d_i;  topk: index_topk (tokens);  kpool: P_k (index_kpool)
        always_select_tail: index_kpool_always_select_tail
    """

    wq_b: Any = weight("[H_i·d_i, r_q]", "wq_b.weight")
    wk: Any = weight("[d_i, D]", "wk.weight")
    k_norm_weight: Any = weight("[d_i]", "k_norm.weight", init=NORM)
    k_norm_bias: Any = weight("[d_i]", "k_norm.bias", init=INERT)
    weights_proj: Any = weight("[H_i, D]", "weights_proj.weight")
    compress_gate: Any = weight("[d_i, D]", "index_kpool_compress_gate")
    compress_ape: Any = weight("[P_k, d_i]", "index_kpool_compress_ape", init=INERT)
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

    def validate(self, hidden: Optional[int] = None, q_rank: Optional[int] = None) -> None:
        """Check the scalars (topk % kpool == 0) and every shape; raise naming the field."""
        check_positive(self, ints=("n_heads", "head_dim", "topk", "kpool"))
        if self.topk % self.kpool:
            raise ValueError(f"IndexerWeights.topk: {self.topk}, expected a multiple of "
                             f"kpool={self.kpool} (index_topk % index_kpool == 0)")
        D = hidden if hidden is not None else int(self.wk.shape[-1])
        rq = q_rank if q_rank is not None else int(self.wq_b.shape[-1])
        check_shapes(self, {"H_i": self.n_heads, "d_i": self.head_dim, "P_k": self.kpool, "r_q": rq, "D": D})


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

@dataclasses.dataclass(frozen=True)
class MHCWeights(Declared):
    """One mHC instance's parameters (SPEC §4; names under `attn_hc.` / `ffn_hc.`) and its scalars.

    Args:
        fn: the projection, rows [pre (N) | post (N) | comb (N·N, row-major m·N + n)]
        base: the bias, split like fn's rows;  scale: the (pre, post, comb) logit scales
        hc_mult: N;  sinkhorn_iters: hc_sinkhorn_iters (>= 1 column normalizations)
        hc_eps: the pre floor and every Sinkhorn denominator;  rms_eps: rms_norm_eps of the input norm
    """

    fn: Any = weight("[(2+N)·N, N·D]", "fn")
    base: Any = weight("[(2+N)·N]", "base", init=INERT)
    scale: Any = weight("[3]", "scale", init=INERT)
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

    def validate(self, hidden: Optional[int] = None) -> None:
        """Check the scalars and every shape against N (and D if given); raise naming the field."""
        check_positive(self, ints=("hc_mult", "sinkhorn_iters"), floats=("hc_eps", "rms_eps"))
        N = self.hc_mult
        if len(self.fn.shape) != 2 or int(self.fn.shape[1]) % N:
            raise ValueError(f"MHCWeights.fn: shape {tuple(self.fn.shape)}, expected [(2+N)·N, N·D] "
                             f"with N={N}")
        check_shapes(self, {"N": N, "D": hidden if hidden is not None else self.hidden})


# ------------------------------------------------------------------------- MoE (SPEC §9, §11)
# Letters: E routed experts, I expert width (moe_intermediate_size), F dense or shared width,
# k experts per token (num_experts_per_tok), G expert groups (n_group).


@dataclasses.dataclass(frozen=True)
class DenseMLPWeights(Declared):
    """A clamped-SwiGLU MLP: the dense layers' `mlp` and the MoE shared expert (SPEC §9.1, §9.2).

    Args:
        swiglu_limit: L of the clamps (10.0)
    """

    gate_proj: Any = weight("[F, D]", "gate_proj.weight")
    up_proj: Any = weight("[F, D]", "up_proj.weight")
    down_proj: Any = weight("[D, F]", "down_proj.weight")
    swiglu_limit: float = 10.0

    @property
    def width(self) -> int:
        return int(self.gate_proj.shape[0])

    def validate(self, hidden: Optional[int] = None) -> None:
        """Check every shape against F (and D if given) and L > 0; raise naming the field."""
        check_shapes(self, {"F": self.width, "D": hidden if hidden is not None else int(self.gate_proj.shape[-1])})
        if not self.swiglu_limit > 0:
            raise ValueError(f"DenseMLPWeights.swiglu_limit: {self.swiglu_limit}, expected > 0")


@dataclasses.dataclass(frozen=True)
class MoEWeights(Declared):
    """One MoE `mlp` (SPEC §9.3; names under `mlp.`).

    Args:
        e_score_correction_bias: used for selection only; float32 (SPEC §11): bf16 merges its clustered values
        gate_up_proj: rows 0..I-1 gate, I..2I-1 up (per expert, gate and up apart on disk)
        shared_gate_proj, shared_up_proj, shared_down_proj: F = I·n_shared_experts; all three None
            when n_shared_experts = 0
        top_k: k_e (num_experts_per_tok);  n_group, topk_group: group-limited routing
        norm_topk_prob: renormalize the k weights;  routed_scaling_factor: x after renormalizing
        swiglu_limit: L of the clamps, shared by routed and shared experts
        nvfp4: None, or the NVFP4 routed experts behind gate_up_proj / down_proj (NVFP4.md A5)
    """

    router: Any = weight("[E, D]", "gate.weight")
    e_score_correction_bias: Any = weight("[E]", "gate.e_score_correction_bias", f32=True, init=INERT)
    gate_up_proj: Any = weight("[E, 2·I, D]", Parts(("experts.{e}.gate_proj.weight", "experts.{e}.up_proj.weight"),
                                                    "[I, D]"), module="experts.gate_up_proj")
    down_proj: Any = weight("[E, D, I]", Parts(("experts.{e}.down_proj.weight",), "[D, I]"),
                            module="experts.down_proj")
    shared_gate_proj: Any = weight("[F, D]", "shared_experts.gate_proj.weight", when="n_shared_experts")
    shared_up_proj: Any = weight("[F, D]", "shared_experts.up_proj.weight", when="n_shared_experts")
    shared_down_proj: Any = weight("[D, F]", "shared_experts.down_proj.weight", when="n_shared_experts")
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

    def validate(self, hidden: Optional[int] = None) -> None:
        """Check the routing scalars (SPEC §13 constraints) and every shape; raise naming the field."""
        check_positive(self, ints=("top_k", "n_group", "topk_group"))
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
        shared = [f.name for f in declared(MoEWeights) if f.optional]
        present = [getattr(self, n) is not None for n in shared]
        if any(present) and not all(present):
            raise ValueError(f"MoEWeights.{shared[present.index(False)]}: None while another shared "
                             f"expert tensor is set, expected all three or none")
        F = int(self.shared_gate_proj.shape[0]) if all(present) else None
        check_shapes(self, {"E": E, "I": I, "F": F, "D": hidden if hidden is not None else int(self.router.shape[-1])})


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

CT, MODELOPT = "compressed-tensors", "modelopt"          # the checkpoint layouts (NVFP4.md A5)


class NVFP4Leaf(NamedTuple):
    """How a checkpoint stores one NVFP4Tensor field of a module, under `<module>.` (NVFP4.md A5)."""

    shape: str          # of the module's [N, K] weight; "[]" one value (compressed-tensors writes it as [1])
    dtype: str          # safetensors dtype
    names: dict         # {layout: leaf name}
    what: str


# one per stored NVFP4Tensor field; compressed-tensors: both global scales ENCODE, ModelOpt: DECODE
NVFP4_LEAVES = {
    "packed": NVFP4Leaf("[N, K/2]", "U8", {CT: "weight_packed", MODELOPT: "weight"}, "packed codes"),
    "block_scale": NVFP4Leaf("[N, K/16]", "F8_E4M3", {CT: "weight_scale", MODELOPT: "weight_scale"}, "block scales"),
    "global_decode": NVFP4Leaf("[]", "F32", {CT: "weight_global_scale", MODELOPT: "weight_scale_2"},
                               "float32 global scale"),
    "input_global_scale": NVFP4Leaf("[]", "F32", {CT: "input_global_scale", MODELOPT: "input_scale"},
                                    "float32 activation global scale"),
}


class NVFP4Tensor(NamedTuple):
    """One NVFP4 weight [N, K] as a kernel receives it (NVFP4.md A1, A4).

    packed:             uint8 [N, K/2], element 2j in the low nibble, 2j+1 in the high nibble
    block_scale:        float8_e4m3fn [N, K/16] LINEAR row-major, or the 128x4 swizzled [Mp, Kp]
                        (oracle.nvfp4.swizzle_scales) where scale_layout is "swizzled"
    global_decode:      float32 scalar, DECODE direction (ModelOpt weight_scale_2 = 1 / weight_global_scale);
                        a fused gate_up may carry two, [2] = (gate rows, up rows) (NVFP4Experts)
    input_global_scale: float32 scalar, ENCODE direction (compressed-tensors input_global_scale), W4A4 only;
                        None for weight-only (W4A16)
    scale_layout:       "linear" or "swizzled", a marker: shapes cannot tell them apart when N % 128 == 0
                        and K/16 % 4 == 0 (GLM-5.3's); only the MoE experts path takes "swizzled"
    """

    packed: Any
    block_scale: Any
    global_decode: Any
    input_global_scale: Any = None
    scale_layout: str = "linear"

    @property
    def shape(self) -> tuple[int, int]:
        """(N, K) of the dequantized weight."""
        return int(self.packed.shape[0]), 2 * int(self.packed.shape[1])

    def map(self, fn: Callable[[Any], Any]) -> "NVFP4Tensor":
        """Apply `fn` to every array field (input_global_scale only where present)."""
        g_in = None if self.input_global_scale is None else fn(self.input_global_scale)
        return NVFP4Tensor(fn(self.packed), fn(self.block_scale), fn(self.global_decode), g_in, self.scale_layout)


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
        """gate rows then up rows ([E, 2I, D/2], [E, 2I, D/16]) as fused w13 kernels take them, BOTH
        global scales kept: global_decode [E, 2] = (gate, up). Real checkpoints differ there (69% of
        pairs, up to 10x, on a published GLM-5.3-Flash ModelOpt checkpoint; one value for both was
        vLLM #54974). The input scale stays one per expert [E]: the fused GEMM quantizes x once."""
        import numpy as np  # the containers stay math-free; this is a concatenation only
        a, b = self.gate.input_global_scale, self.up.input_global_scale
        if (a is None) != (b is None) or (a is not None and not np.array_equal(a, b)):
            raise ValueError("NVFP4ExpertWeights.input_global_scale: gate and up differ; a fused gate_up GEMM "
                             "quantizes x ONCE (both halves read the same x, so a calibrated checkpoint has "
                             "equal values) and one half would see a scale it was not calibrated for: run "
                             "gate and up as separate GEMMs, or recalibrate both with one input scale")
        g = np.stack([np.asarray(t.global_decode, np.float32).reshape(-1) for t in (self.gate, self.up)], -1)
        return NVFP4Tensor(np.concatenate([self.gate.packed, self.up.packed], axis=1),
                           np.concatenate([self.gate.block_scale, self.up.block_scale], axis=1),
                           g, self.gate.input_global_scale)


class NVFP4Experts(NamedTuple):
    """Stacked NVFP4 routed experts as fused-w13 kernels take them (NVFP4.md A5, A7).

    gate_up: NVFP4Tensor of [E, 2I, D] (rows 0..I-1 gate): packed [E, 2I, D/2], block_scale
             [E, 2I, D/16] LINEAR, or [E, Mp, Kp] with scale_layout "swizzled" (each expert swizzled
             on its own); global_decode float32 [E, 2] (DECODE, gate's then up's, as checkpoints
             have them) or [E] (shared); input_global_scale float32 [E] (ENCODE, W4A4's static
             scale of x, one for both halves: x is quantized once) or None
    down:    the same for down_proj [E, D, I] with global_decode [E]; input_global_scale is the static
             scale of h
    NumPy fields on the oracle side, torch on the impl side (oracle.nvfp4 and impl.nvfp4 re-export it).
    """

    gate_up: NVFP4Tensor
    down: NVFP4Tensor

    def map(self, fn) -> "NVFP4Experts":
        return NVFP4Experts(self.gate_up.map(fn), self.down.map(fn))


def fused_experts(nv) -> NVFP4Experts:
    """NVFP4Experts as is, or a checkpoint's NVFP4ExpertWeights (gate, up, down) with gate and up fused."""
    if isinstance(nv, NVFP4Experts):
        return nv
    if callable(getattr(nv, "gate_up", None)):
        return NVFP4Experts(nv.gate_up(), nv.down)
    raise ValueError(f"nvfp4: expected NVFP4Experts or NVFP4ExpertWeights, got {type(nv).__name__}")


# ------------------------------------------------------------------------- the whole decoder (SPEC §3, §5)
# Letters: V vocab_size, D hidden size.


@dataclasses.dataclass(frozen=True)
class LayerWeights(Declared):
    """One decoder layer (SPEC §5): norms, both mHC instances, the attention kind's weights, the MLP.

    attention: "linear_attention" (kda set) or "indexed_attention" (mla set; indexer set on "full"
    layers, None on "shared" ones); mlp: DenseMLPWeights ("dense") or MoEWeights ("sparse").
    """

    index: int
    attention: str
    indexer_type: str
    input_layernorm: Any = weight("[D]", "input_layernorm.weight", init=NORM)
    post_attention_layernorm: Any = weight("[D]", "post_attention_layernorm.weight", init=NORM)
    attn_hc: MHCWeights = part("attn_hc.", disk="hc_attn_")
    ffn_hc: MHCWeights = part("ffn_hc.", disk="hc_ffn_")
    kda: Optional[KDAWeights] = part("self_attn.")
    mla: Optional[MLAWeights] = part("self_attn.")
    indexer: Optional[IndexerWeights] = part("self_attn.indexer.")
    mlp: Union[DenseMLPWeights, MoEWeights] = part("mlp.")


@dataclasses.dataclass(frozen=True)
class Weights(Declared):
    """The whole text decoder (SPEC §3): float64 from oracle.checkpoint, torch after impl.weights.to_torch.

    lm_head is top level in a checkpoint (not under the text prefix) and is embed_tokens when tied.
    """

    geometry: Any
    embed_tokens: Any = weight("[V, D]", "embed_tokens.weight", init=EMBED)
    norm: Any = weight("[D]", "norm.weight", init=NORM)
    lm_head: Any = weight("[V, D]", "lm_head.weight")
    layers: tuple = part("layers.{i}.")


# kept in float32 whatever the working dtype (SPEC §11): the declarations' f32 fields
F32_WEIGHTS = tuple(f.name for c in (KDAWeights, MLAWeights, IndexerWeights, MHCWeights, DenseMLPWeights,
                                     MoEWeights, LayerWeights, Weights) for f in declared(c) if f.f32)


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
