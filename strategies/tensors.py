"""Tensors from seeds: every array is built from np.random.default_rng(seed) in float64.

Distribution families put the data where bugs live: `normal`; `gate_low` (g near the -5 bound);
`gate_high` (g near 0: almost no decay, long memory); `beta_extreme` (beta near 0 and 1);
`tiny_qk` (pre-norm q, k of norm ~1e-3, where the L2 eps placement matters); `large` (x30 inputs).
The MoE router's adversarial inputs (a bias like the released checkpoint's, logits far below zero,
exact ties at the top-k / top-group cut, negative biased scores) follow `moe_weights`.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from oracle import kda as okda
from oracle.types import KDAState, KDAWeights

FAMILIES = ("normal", "gate_low", "gate_high", "beta_extreme", "tiny_qk", "large")


def check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ValueError(f"family: expected one of {FAMILIES}, got {family!r}")


# (shift of f = shift + N(0, 1), A_log) a family puts the gate at: gate_low at its strong end (sigmoid(e·f)
# ~ 1, g ~ -5 bounded; ~ -16 a token under softplus), gate_high near 0; every other family (0, 0)
GATE_LOGITS = {"gate_low": (6.0, 1.0), "gate_high": (-8.0, 0.5)}


def _gate_logits(rng, shape, family):
    """f and A_log such that the gate lands where the family wants it."""
    shift, a = GATE_LOGITS.get(family, (0.0, 0.0))
    return shift + rng.standard_normal(shape), a


def core_tensors(rng, heads, head_dim, batch, length, family, lower_bound=-5.0):
    """q, k (normalised, q scaled), v, g, beta for the KDA core: [B,T,H,K] / [B,T,H]."""
    check_family(family)
    B, T, H, K = batch, length, heads, head_dim
    scale = 1e-3 if family == "tiny_qk" else 1.0
    q = okda.l2norm(scale * rng.standard_normal((B, T, H, K))) * K ** -0.5
    k = okda.l2norm(scale * rng.standard_normal((B, T, H, K)))
    v = rng.standard_normal((B, T, H, K)) * (30.0 if family == "large" else 1.0)
    f, a = _gate_logits(rng, (B, T, H, K), family)
    g = okda.gate(f, np.full(H, a), lower_bound)
    b = rng.standard_normal((B, T, H)) * (12.0 if family == "beta_extreme" else 1.0)
    beta = 1.0 / (1.0 + np.exp(-b))
    return dict(q=q, k=k, v=v, g=g, beta=beta)


def initial_state(rng, rows, heads, head_dim):
    return 0.5 * rng.standard_normal((rows, heads, head_dim, head_dim))


def kda_weights(rng, heads, head_dim, hidden, conv_width, family="normal", lower_bound=-5.0,
                eps=1e-5) -> KDAWeights:
    """Non-trivial KDA parameters (SPEC §13: randomise what init leaves inert, e.g. A_log, norms)."""
    H, K, D, W = heads, head_dim, hidden, conv_width
    s = D ** -0.5
    n = rng.standard_normal
    f_shift, a_log = {"gate_low": (6.0, 1.0), "gate_high": (-8.0, 0.5)}.get(family, (0.0, 0.0))
    return KDAWeights(
        q_proj=s * n((H * K, D)), k_proj=s * n((H * K, D)), v_proj=s * n((H * K, D)),
        conv1d=0.5 * n((3 * H * K, W)),
        f_a_proj=s * n((K, D)), f_b_proj=K ** -0.5 * n((H * K, K)),
        dt_bias=f_shift + 0.5 * n(H * K), A_log=a_log + 0.5 * n(H),
        b_proj=(12.0 if family == "beta_extreme" else 1.0) * s * n((H, D)),
        g_a_proj=s * n((K, D)), g_b_proj=K ** -0.5 * n((H * K, K)),
        o_norm=1.0 + 0.1 * n(K), o_proj=(H * K) ** -0.5 * n((D, H * K)),
        lower_bound=lower_bound, eps=eps,
    )


def hidden_states(rng, batch, length, hidden, family):
    """Sublayer input a [B,S,D]; `tiny_qk` shrinks it so projected q, k have norm ~1e-3."""
    check_family(family)
    scale = {"tiny_qk": 1e-3, "large": 30.0}.get(family, 1.0)
    return scale * rng.standard_normal((batch, length, hidden))


def kda_state(rng, rows, heads, head_dim, conv_width):
    """A non-zero incoming KDAState (recurrent + conv window of pre-conv inputs)."""
    return KDAState(0.5 * rng.standard_normal((rows, heads, head_dim, head_dim)),
                    rng.standard_normal((rows, 3 * heads * head_dim, conv_width)))


def indexer_weights(rng, g, family="normal"):
    """Non-trivial indexer parameters (SPEC §13: random ape, gate and LayerNorm bias; signed head weights)."""
    from oracle.types import IndexerWeights

    n = rng.standard_normal
    s = g.hidden ** -0.5
    return IndexerWeights(
        wq_b=g.q_rank ** -0.5 * n((g.index_heads * g.index_dim, g.q_rank)), wk=s * n((g.index_dim, g.hidden)),
        k_norm_weight=1.0 + 0.1 * n(g.index_dim), k_norm_bias=0.5 * n(g.index_dim),
        weights_proj=s * n((g.index_heads, g.hidden)) * (3.0 if family == "large" else 1.0),
        compress_gate=s * n((g.index_dim, g.hidden)), compress_ape=0.5 * n((g.kpool, g.index_dim)),
        n_heads=g.index_heads, head_dim=g.index_dim, topk=g.topk, kpool=g.kpool, always_select_tail=True)


def mla_weights(rng, g, eps=1e-5):
    """MLA parameters with non-trivial norm weights (SPEC §13)."""
    from oracle.types import MLAWeights

    n = rng.standard_normal
    s = g.hidden ** -0.5
    return MLAWeights(
        q_a_proj=s * n((g.q_rank, g.hidden)), q_a_layernorm=1.0 + 0.1 * n(g.q_rank),
        q_b_proj=g.q_rank ** -0.5 * n((g.heads * g.nope_dim, g.q_rank)),
        kv_a_proj_with_mqa=s * n((g.kv_rank, g.hidden)), kv_a_layernorm=1.0 + 0.1 * n(g.kv_rank),
        kv_b_proj=g.kv_rank ** -0.5 * n((g.heads * (g.nope_dim + g.v_dim), g.kv_rank)),
        o_proj=(g.heads * g.v_dim) ** -0.5 * n((g.hidden, g.heads * g.v_dim)),
        num_heads=g.heads, nope_dim=g.nope_dim, v_dim=g.v_dim, eps=eps)


def mhc_weights(rng, N, D, iters, family="normal", hc_eps=1e-6, rms_eps=1e-5):
    """mHC parameters far from uniform mixing (SPEC §13: fn x20, random base and scale)."""
    from oracle.types import MHCWeights

    boost = 20.0 if family == "boosted" else 1.0
    return MHCWeights(fn=boost * 0.02 * rng.standard_normal(((2 + N) * N, N * D)),
                      base=0.5 * rng.standard_normal((2 + N) * N), scale=1.0 + 0.5 * rng.standard_normal(3),
                      hc_mult=N, sinkhorn_iters=iters, hc_eps=hc_eps, rms_eps=rms_eps)


def moe_weights(rng, *, experts=8, top_k=2, n_group=2, topk_group=1, hidden=32, width=16, shared=1,
                gain=40 * 0.02 * 32 ** 0.5):
    """Random float64 MoE weights (tiny defaults of SPEC §13): fan-in-scaled normals, gate/up scaled by
    `gain` so the ±10 SwiGLU clamps fire, correction bias N(0, 0.5²), `shared` shared experts."""
    from oracle.types import MoEWeights

    def n(*shape, g=1.0):
        return g * rng.normal(size=shape) / shape[-1] ** 0.5

    F = width * shared
    return MoEWeights(
        router=n(experts, hidden), e_score_correction_bias=0.5 * rng.normal(size=experts),
        gate_up_proj=n(experts, 2 * width, hidden, g=gain), down_proj=n(experts, hidden, width),
        shared_gate_proj=n(F, hidden, g=gain) if shared else None,
        shared_up_proj=n(F, hidden, g=gain) if shared else None,
        shared_down_proj=n(hidden, F) if shared else None,
        top_k=top_k, n_group=n_group, topk_group=topk_group)


def significant(a, bits: int):
    """a rounded to `bits` significant binary digits (exact in bf16 for bits <= 8)."""
    m, e = np.frexp(a)
    return np.ldexp(np.round(m * 2.0 ** bits), e - bits)


# ---------------------------------------------------------------- adversarial routing (issue 13 item 8)
# The released GLM-5.2 correction bias sits in a narrow band far from zero: [6.817, 7.063] (sglang #31213)
# and 11.13..11.32 with 196 of 256 values unique (sglang #30989). bf16 steps by 1/32 at 7 and 1/16 at 11,
# so a bf16 copy of it merges neighbouring experts; with router logits far below zero sigmoid(logit)
# falls below float32's ulp of the bias and equal biases become bitwise-equal selection keys.
CHECKPOINT_BIAS_CENTRES = (7.0, 11.2)


# a quarter of the experts copy another's bias (the checkpoint: 196 of 256 values unique)
BIAS_DUPLICATES = 0.25


def checkpoint_bias(rng, experts: int):
    """A bias like the released checkpoint's: one centre of CHECKPOINT_BIAS_CENTRES + 0.05 N(0, 1) (a
    band ~0.3 wide over 256 experts; the checkpoint's is 0.246), a BIAS_DUPLICATES fraction of the experts
    a bit-for-bit copy of another expert's value (the checkpoint's duplicates are a training artifact)."""
    b = rng.choice(CHECKPOINT_BIAS_CENTRES) + 0.05 * rng.standard_normal(experts)
    n = int(round(BIAS_DUPLICATES * experts))
    if n and experts > 1:
        b[rng.choice(experts, n, replace=False)] = b[rng.choice(experts, n)]
    return b


def tie_at(b, top: int):
    """b with its top-th and (top+1)-th largest values made equal (a tie straddling a top-`top` cut)."""
    order = np.argsort(-b, kind="stable")
    b = b.copy()
    if top < len(b):
        b[order[top]] = b[order[top - 1]]
    return b


def tie_groups(b, n_group: int, topk_group: int, rng):
    """b with the group ranked topk_group (0-based, by the sum of its top-2 values) given the values of the
    one ranked topk_group - 1, permuted: their group scores tie exactly across the topk_group cut."""
    if topk_group >= n_group:
        return b
    per = b.reshape(n_group, -1)
    score = np.sort(per, axis=1)[:, -2:].sum(1)
    order = np.argsort(-score, kind="stable")
    per = per.copy()
    per[order[topk_group]] = rng.permutation(per[order[topk_group - 1]])
    return per.reshape(-1)


def negative_bias(rng, experts: int):
    """A bias that makes most biased scores negative: -U(0.5, 3) + 0.3 N(0, 1). With some below -1 every
    score of those experts is negative; near -0.5 some scores stay positive (a mix at the cut)."""
    return -rng.uniform(0.5, 3.0) + 0.3 * rng.standard_normal(experts)


def far_negative_logits(rng, router, x):
    """(router, x) with every router logit far below zero: x[:, 0] in [3, 4] (3 significant bits, exact in
    bf16) times a column 0 of -U(16, 64) / 3.5 per case, plus the other columns' O(1) part: logits
    about -14 .. -77. From -16 float32 sigmoid (1e-7) is below half an ulp of a bias at 7 (2.4e-7), so
    sigmoid + bias == bias; past ~-46 the k weights sum below the 1e-20 of the renormalisation. Deeper
    than ~-87 float32 sigmoid leaves the normal range (exp(-logit) overflows, s is 0 or subnormal while
    float64 keeps e^logit): the weights, ~1e-23 there, would be judged on float32's range, not on the
    router, so the family stops at ~-77 (s ~ 3e-34, float32-normal)."""
    router, x = router.copy(), x.copy()
    x[:, 0] = significant(rng.uniform(3.0, 4.0, len(x)), 3)
    router[:, 0] = -rng.uniform(16.0, 64.0) / 3.5
    return router, x


# a case's seed: every array of a check is drawn from it, so a case is small and replayable
SEEDS = st.integers(0, 2**32 - 1)


def families() -> st.SearchStrategy[str]:
    return st.sampled_from(FAMILIES)
