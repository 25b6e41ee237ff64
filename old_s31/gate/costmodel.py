"""Predicted per-GPU memory, HBM traffic, FLOPs and communication of the GLM-5.3-Flash decoder
(`glmgate cost`): arithmetic on a Geometry, a dtype plan and a parallel plan. No torch, no device;
every number is a PREDICTION to hold measurements against (gate/bench_layer.py measures them).

Letters (SPEC §1): L layers, D hidden, V vocab, N mHC streams, h / d KDA heads / head dim, W conv
kernel, H / d_n / d_v / r_q / r_kv MLA heads, dims and latent ranks, H_i / d_i / P_k indexer heads,
head dim and pool size, E / k_e / I routed experts, experts per token, expert width, F dense width,
F_s shared-expert width; B sequences, T tokens in the cache (context), C prefill chunk tokens.

Dtype plan: every weight in bf16 except the tensors the repo's loader keeps in float32 (KDA conv1d,
dt_bias, A_log and the router's e_score_correction_bias: oracle.types F32_WEIGHTS); with
experts="nvfp4" the routed experts are NVFP4 (0.5 B a code, one e4m3 byte per 16 codes along the
reduction dim, one float32 global scale per expert tensor: gate, up and down each have their own).
Caches: KDA recurrent state float32, conv window, MLA latent and indexer rows in bf16 (SPEC §10).

Parallel plan: TP ranks split heads and widths; EP ranks split the routed experts by expert id.
world = max(TP, EP) GPUs; when EP > TP, attention is data-parallel (world / TP replicas, each with
its own B sequences) and tokens reach their experts by all-to-all; when EP < TP each expert is also
split by width over TP / EP ranks (EP = 1: every expert width-split over TP). Split (/TP): KDA q, k, v,
conv, f_b, b, g_b, dt_bias, A_log, o_proj and the recurrent and conv states; MLA q_b, kv_b, o_proj; the
dense MLP; the shared expert. Whole on every GPU: embeddings and lm_head unless vocab_parallel, mHC,
norms, the router, KDA f_a / g_a / o_norm, MLA q_a / kv_a (+ their norms) and the latent cache, the
indexer's weights and its cache. A decode step of B tokens per TP group ends every sublayer whose
output is split by rank with one all-reduce of [B, D] bf16 (ring: 2 (n - 1) / n of the payload on the
wire per GPU).

Counted per decode token: FLOPs = 2 x the weights the token multiplies on this GPU, plus the
attention terms (KDA's recurrence 7 d^2 per head; MLA's absorbed attention 4 (r_kv + rope) per selected
token per head; the indexer's pooling 6 d_i per cached token and scoring 2 H_i (d_i + 1) per pool,
which is what grows with the context). HBM bytes per decode step = weights read (routed experts: the
expected number touched by the step's tokens under uniform routing) + each sequence's state read and
written + its cache rows read (MLA: the selected rows; the indexer: every cached row, since pools are
rebuilt from the per-token rows on every forward, SPEC §10).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from oracle.config import DENSE, FULL, LINEAR, ConfigError, Geometry

__all__ = ["BF16", "F32", "NVFP4_BLOCK", "EXPERT_DTYPES", "MECHANISMS", "CostError", "Plan", "Cost", "Report",
           "resolve_geometry", "layer_cost", "model_cost",
           "nvfp4_bytes", "H200_HBM_BW", "H200_BF16_FLOPS", "NVLINK_BW"]

BF16, F32, INDEX = 2, 4, 8
NVFP4_BLOCK = 16
EXPERT_DTYPES = ("bf16", "nvfp4")
KDA_CHUNK = 64

# defaults of the roofline (H200 SXM datasheet: 4.8 TB/s HBM3e, 989 TFLOP/s dense bf16; NVLink 4:
# 900 GB/s per GPU both directions together, 450 GB/s each way)
H200_HBM_BW, H200_BF16_FLOPS, NVLINK_BW = 4.8e12, 989e12, 450e9

# the itemized terms, in table order: key -> what it holds
MECHANISMS = {
    "embeddings": "embed_tokens [V, D]",
    "mhc": "attn_hc + ffn_hc per layer: fn [(2+N)N, ND], base, scale",
    "norms": "input / post-attention RMSNorms per layer + final norm",
    "kda_proj": "KDA q/k/v/b/f_b/g_b/o_proj, dt_bias, A_log (/TP); f_a, g_a, o_norm (whole)",
    "kda_conv": "KDA short conv [3hd, W] f32 and its window state [3hd, W] bf16",
    "kda_state": "KDA recurrent state [h, d, d] f32 and the recurrence",
    "mla_proj": "MLA q_b, kv_b, o_proj (/TP); q_a, kv_a + their norms (whole)",
    "mla_latent_cache": "MLA latent rows [T, r_kv + rope] bf16 (whole) and sparse attention",
    "indexer": "DSA indexer wq_b, wk, k_norm, weights_proj, pool gate + ape (whole)",
    "indexer_cache": "indexer rows [T, 2 d_i + 1] bf16 (whole), pooling and scoring",
    "dense_mlp": "dense SwiGLU gate/up/down (/TP)",
    "router": "router [E, D] + correction bias [E] f32 (whole)",
    "shared_expert": "shared expert gate/up/down (/TP)",
    "experts": "routed experts gate/up/down (/EP by expert, /(world/EP) by width)",
    "lm_head": "lm_head [V, D]",
}


class CostError(ValueError):
    """A plan the geometry cannot be split by, or bad input; the message names the field."""


# ----------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Plan:
    """A dtype plan and a parallel plan (module docstring). Build with `Plan.make` (validated).

    tp: tensor-parallel ranks;  ep: expert-parallel ranks (default tp);  experts: "bf16" or "nvfp4"
    vocab_parallel: embeddings and lm_head split by vocab rows over TP (default: whole on every GPU)
    """

    tp: int = 1
    ep: int = 1
    experts: str = "bf16"
    vocab_parallel: bool = False

    @property
    def world(self) -> int:
        """GPUs of one model replica: max(TP, EP)."""
        return max(self.tp, self.ep)

    @property
    def expert_tp(self) -> int:
        """Ranks each routed expert's width is split over: world / EP."""
        return self.world // self.ep

    @property
    def attention_dp(self) -> int:
        """Data-parallel attention replicas inside the EP group: world / TP (1 unless EP > TP)."""
        return self.world // self.tp

    @property
    def vocab_tp(self) -> int:
        return self.tp if self.vocab_parallel else 1

    @classmethod
    def make(cls, g: Geometry, tp: int = 1, ep: Optional[int] = None, experts: str = "bf16",
             vocab_parallel: bool = False) -> "Plan":
        """The validated plan; CostError naming the Geometry field a rank count does not divide."""
        for name, v in (("tp", tp), ("ep", ep)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise CostError(f"{name}={v!r}: expected a positive int")
        if experts not in EXPERT_DTYPES:
            raise CostError(f"experts={experts!r}: expected one of {list(EXPERT_DTYPES)}")
        plan = cls(tp, tp if ep is None else ep, experts, bool(vocab_parallel))
        plan._check(g)
        return plan

    def _check(self, g: Geometry) -> None:
        tp, ep = self.tp, self.ep
        splits = [
            ("num_attention_heads", g.num_attention_heads, bool(g.dsa_layers), "MLA heads (q_b, kv_b, o_proj)"),
            ("linear_num_heads", g.linear_num_heads, bool(g.kda_layers), "KDA heads (q/k/v, conv, state)"),
            ("intermediate_size", g.intermediate_size, bool(g.dense_layers), "the dense MLP's width"),
            ("moe_intermediate_size * n_shared_experts", g.shared_intermediate_size,
             bool(g.moe_layers) and g.n_shared_experts > 0, "the shared expert's width"),
        ]
        for name, value, used, what in splits:
            if used and value % tp:
                raise CostError(f"tp={tp} does not divide {name}={value}: {what} are split over the TP "
                                f"ranks; choose tp among {_divisors(value)}")
        if not g.moe_layers:
            return
        E, I = g.n_routed_experts, g.moe_intermediate_size
        if E % ep:
            raise CostError(f"ep={ep} does not divide n_routed_experts={E}: each EP rank holds E / EP whole "
                            f"experts; choose ep among {_divisors(E)}")
        if max(tp, ep) % min(tp, ep):
            raise CostError(f"tp={tp}, ep={ep}: the larger must be a multiple of the smaller (one group of "
                            f"max(tp, ep) GPUs: attention replicated over world / tp, experts split by "
                            f"width over world / ep)")
        if I % self.expert_tp:
            raise CostError(f"moe_intermediate_size={I} is not divisible by world / ep = {self.expert_tp}: "
                            f"with ep < tp each routed expert is split by width over tp / ep ranks")
        if self.experts == "nvfp4":
            if g.hidden_size % NVFP4_BLOCK:
                raise CostError(f"hidden_size={g.hidden_size}: NVFP4 gate/up blocks run along D in "
                                f"{NVFP4_BLOCK}s; expected a multiple of {NVFP4_BLOCK}")
            if (I // self.expert_tp) % NVFP4_BLOCK:
                raise CostError(f"moe_intermediate_size={I} / (world / ep = {self.expert_tp}) = "
                                f"{I // self.expert_tp}: NVFP4 down_proj blocks run along I in {NVFP4_BLOCK}s, "
                                f"so each rank's width must be a multiple of {NVFP4_BLOCK}")

    def describe(self) -> str:
        vocab = ("embeddings and lm_head split by vocab rows over TP" if self.vocab_parallel else
                 "embeddings and lm_head whole on every GPU (not vocab-parallel)")
        attn = f", attention data-parallel x{self.attention_dp}" if self.attention_dp > 1 else ""
        width = f", each expert width-split over {self.expert_tp}" if self.expert_tp > 1 else ""
        return (f"TP={self.tp}, EP={self.ep} on {self.world} GPU{'s' if self.world > 1 else ''}{attn}{width}; "
                f"routed experts {self.experts}, everything else bf16; {vocab}")


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, min(n, 64) + 1) if n % k == 0]


def nvfp4_bytes(rows: int, k: int, tensors: int = 1) -> int:
    """Bytes of `tensors` NVFP4 weights [rows, k] (k the reduction dim): codes, e4m3 block scales,
    one float32 global scale each."""
    return tensors * (rows * k // 2 + rows * (k // NVFP4_BLOCK) + F32)


# ----------------------------------------------------------------------------- one term


@dataclass
class Cost:
    """One mechanism's share, per GPU (module docstring says what each counts).

    weights: bytes held;  replicated: the part of `weights` held whole on every GPU;
    unsharded: what `weights` would be on one GPU (TP = EP = 1);  state: bytes per sequence that do
    not grow with the context;  cache: bytes per sequence per cached token;  hbm: bytes read +
    written per decode step of B tokens;  flops: per decode token;  comm: bytes each GPU puts on the
    links per decode step;  collectives: their count;  layers: how many layers contribute
    """

    weights: int = 0
    replicated: int = 0
    unsharded: int = 0
    state: int = 0
    cache: int = 0
    hbm: float = 0.0
    flops: float = 0.0
    comm: float = 0.0
    collectives: int = 0
    layers: int = 0

    def add(self, other: "Cost") -> "Cost":
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def state_cache(self, context: int) -> int:
        """Bytes per sequence at `context` cached tokens."""
        return self.state + context * self.cache


REP = None      # the divisor of a tensor that no plan splits


def _w(*tensors) -> tuple[int, int, int]:
    """(per-GPU, replicated, unsharded) bytes of (elements, divisor, bytes per element) tensors;
    divisor REP = whole on every GPU whatever the plan."""
    per = sum(n // (div or 1) * b for n, div, b in tensors)
    rep = sum(n * b for n, div, b in tensors if div is REP)
    return per, rep, sum(n * b for n, _, b in tensors)


def _weights(per_rep_all, **kw) -> Cost:
    per, rep, full = per_rep_all
    return Cost(weights=per, replicated=rep, unsharded=full, **kw)


def _allreduce(payload: float, n: int) -> float:
    return 2 * (n - 1) / n * payload


# ----------------------------------------------------------------------------- the sublayers


def _selected(g: Geometry, T: int) -> int:
    """Tokens the decode query at position T - 1 attends (SPEC §8.6-8.7): its whole prefix until the
    pools outnumber the budget, then index_topk pool tokens + the incomplete tail."""
    if T < g.index_topk + g.index_kpool:
        return T
    tail = T % g.index_kpool if g.index_kpool_always_select_tail and g.index_kpool > 1 else 0
    return g.index_topk + tail


def _mhc(g: Geometry, plan: Plan, B: int) -> Cost:
    N, D, M = g.hc_mult, g.hidden_size, g.hc_rows
    w = _w((M * N * D, REP, BF16), (M, REP, BF16), (3, REP, BF16))
    # coefficient net + Sinkhorn + collapse + write-back (post y + C^T X), per instance
    elementwise = 3 * N * D + 4 * g.hc_sinkhorn_iters * N * N + 2 * N * D + 2 * N * D + 2 * N * N * D
    one = _weights(w, hbm=w[0], flops=2 * M * N * D + elementwise, layers=1)
    return one.add(dataclasses.replace(one, layers=0))


def _norms(g: Geometry, plan: Plan, B: int, count: int = 2) -> Cost:
    w = _w((count * g.hidden_size, REP, BF16))
    return _weights(w, hbm=w[0], flops=4 * count * g.hidden_size, layers=1)


def _kda(g: Geometry, plan: Plan, B: int) -> dict[str, Cost]:
    tp, D, h, d, W = plan.tp, g.hidden_size, g.linear_num_heads, g.linear_head_dim, g.linear_conv_kernel_dim
    hd = h * d
    proj = _w((3 * hd * D, tp, BF16), (hd * d, tp, BF16), (h * D, tp, BF16), (hd * d, tp, BF16),
              (D * hd, tp, BF16), (hd, tp, F32), (h, tp, F32),                        # q,k,v f_b b g_b o
              (d * D, REP, BF16), (d * D, REP, BF16), (d, REP, BF16))                        # f_a g_a o_norm
    matmul = 3 * hd * D // tp + 2 * hd * d // tp + h * D // tp + D * hd // tp + 2 * d * D
    comm = _allreduce(B * D * BF16, tp) if tp > 1 else 0.0
    conv_w = _w((3 * hd * W, tp, F32))
    conv_state = 3 * hd // tp * W * BF16
    rec = h // tp * d * d * F32
    return {
        "kda_proj": _weights(proj, hbm=proj[0], flops=2 * matmul + 10 * hd // tp, comm=comm,
                             collectives=int(tp > 1), layers=1),
        "kda_conv": _weights(conv_w, state=conv_state, hbm=conv_w[0] + 2 * B * conv_state,
                             flops=2 * W * 3 * hd // tp, layers=1),
        # decay d^2, prediction M^T k 2d^2, update k delta^T 2d^2, output M^T q 2d^2 (SPEC §6.6)
        "kda_state": Cost(state=rec, hbm=2 * B * rec, flops=7 * d * d * h // tp, layers=1),
    }


def _mla(g: Geometry, plan: Plan, B: int, T: int) -> dict[str, Cost]:
    tp, D, H = plan.tp, g.hidden_size, g.num_attention_heads
    rq, rkv, rope, dn, dv = g.q_lora_rank, g.kv_lora_rank, g.qk_rope_head_dim, g.qk_nope_head_dim, g.v_head_dim
    bias = [(rq, REP, BF16), (rkv + rope, REP, BF16), (D, REP, BF16)] if g.attention_bias else []
    proj = _w((rq * D, REP, BF16), (rq, REP, BF16), (H * dn * rq, tp, BF16), ((rkv + rope) * D, REP, BF16),
              (rkv, REP, BF16), (H * (dn + dv) * rkv, tp, BF16), (D * H * dv, tp, BF16), *bias)
    matmul = rq * D + H * dn * rq // tp + (rkv + rope) * D + H * (dn + dv) * rkv // tp + D * H * dv // tp
    comm = _allreduce(B * D * BF16, tp) if tp > 1 else 0.0
    row = (rkv + rope) * BF16
    n_sel = _selected(g, T)
    return {
        "mla_proj": _weights(proj, hbm=proj[0], flops=2 * matmul, comm=comm, collectives=int(tp > 1), layers=1),
        # absorbed decode: scores q~ . c and the weighted sum of c, per selected token per head
        "mla_latent_cache": Cost(cache=row, hbm=B * (n_sel + 1) * row,
                                 flops=4 * n_sel * (rkv + rope) * H // tp + 5 * n_sel * H // tp, layers=1),
    }


def _indexer(g: Geometry, plan: Plan, B: int, T: int) -> dict[str, Cost]:
    D, Hi, di, Pk, rq = g.hidden_size, g.index_n_heads, g.index_head_dim, g.index_kpool, g.q_lora_rank
    w = _w((Hi * di * rq, REP, BF16), (di * D, REP, BF16), (2 * di, REP, BF16), (Hi * D, REP, BF16),
           (di * D, REP, BF16), (Pk * di, REP, BF16))
    matmul = Hi * di * rq + di * D + Hi * D + di * D
    row = (2 * di + 1) * BF16
    pools = T // Pk
    return {
        "indexer": _weights(w, hbm=w[0], flops=2 * matmul + 8 * di, layers=1),
        # pools rebuilt from every cached row (per-channel softmax over P_k members + weighted sum),
        # then every pool scored by every head (SPEC §8.3-8.4)
        "indexer_cache": Cost(cache=row, hbm=B * (T + 1) * row, flops=6 * T * di + 2 * Hi * (di + 1) * pools,
                              layers=1),
    }


def _dense(g: Geometry, plan: Plan, B: int) -> Cost:
    tp, D, F = plan.tp, g.hidden_size, g.intermediate_size
    w = _w((3 * F * D, tp, BF16))
    comm = _allreduce(B * D * BF16, tp) if tp > 1 else 0.0
    return _weights(w, hbm=w[0], flops=2 * 3 * F * D // tp + 4 * F // tp, comm=comm, collectives=int(tp > 1),
                    layers=1)


def experts_touched(g: Geometry, plan: Plan, B: int) -> float:
    """Expected routed experts of one GPU that a decode step's tokens reach (uniform routing): each
    of the E / EP local experts is missed by all B x (world / TP) tokens of the EP group with
    probability (1 - k_e / E) ** tokens."""
    E, k = g.n_routed_experts, g.num_experts_per_tok
    tokens = B * plan.attention_dp
    return E // plan.ep * (1.0 - (1.0 - k / E) ** tokens)


def expert_bytes(g: Geometry, plan: Plan) -> int:
    """Bytes of one routed expert's share on one GPU (gate, up, down; width I / (world / EP))."""
    D, I = g.hidden_size, g.moe_intermediate_size // plan.expert_tp
    if plan.experts == "nvfp4":
        return nvfp4_bytes(I, D, tensors=2) + nvfp4_bytes(D, I)
    return 3 * I * D * BF16


def _moe(g: Geometry, plan: Plan, B: int) -> dict[str, Cost]:
    tp, ep, D, E, k = plan.tp, plan.ep, g.hidden_size, g.n_routed_experts, g.num_experts_per_tok
    Fs = g.shared_intermediate_size
    router = _w((E * D, REP, BF16), (E, REP, F32))
    shared = _w((3 * Fs * D, tp, BF16))
    one = expert_bytes(g, plan)
    full = expert_bytes(g, Plan(experts=plan.experts)) * E
    experts = Cost(weights=E // ep * one, unsharded=full, hbm=round(experts_touched(g, plan, B) * one),
                   flops=2 * k * 3 * g.moe_intermediate_size * D / plan.world, layers=1)
    shared_comm = Cost()
    if plan.attention_dp == 1:
        if plan.world > 1:           # routed partial sums and the shared expert's: one fused all-reduce
            experts.comm, experts.collectives = _allreduce(B * D * BF16, tp), 1
    else:                            # all-to-all dispatch + combine of each token's k_e copies
        experts.comm = 2 * (B / tp) * k * D * BF16 * (ep - 1) / ep
        experts.collectives = 2
        if tp > 1:
            shared_comm = Cost(comm=_allreduce(B * D * BF16, tp), collectives=1)
    return {
        "router": _weights(router, hbm=router[0], flops=2 * E * D + 10 * E, layers=1),
        "shared_expert": _weights(shared, hbm=shared[0], flops=2 * 3 * Fs * D // tp, layers=1).add(shared_comm)
        if Fs else Cost(),
        "experts": experts,
    }


def layer_cost(g: Geometry, plan: Plan, i: int, batch: int = 1, context: int = 4096) -> dict[str, Cost]:
    """Layer i's terms by MECHANISMS key (only those it has), per GPU, for a decode step of `batch`
    tokens per TP group at `context` cached tokens (the new token included)."""
    out = {"mhc": _mhc(g, plan, batch), "norms": _norms(g, plan, batch)}
    if g.layer_types[i] == LINEAR:
        out.update(_kda(g, plan, batch))
    else:
        out.update(_mla(g, plan, batch, context))
        if g.indexer_types[i] == FULL:
            out.update(_indexer(g, plan, batch, context))
    if g.mlp_layer_types[i] == DENSE:
        out["dense_mlp"] = _dense(g, plan, batch)
    else:
        out.update(_moe(g, plan, batch))
    return out


def _ends(g: Geometry, plan: Plan, B: int) -> dict[str, Cost]:
    """Embeddings, final norm and lm_head (a tied lm_head is the embedding: no bytes of its own)."""
    tpv, V, D = plan.vocab_tp, g.vocab_size, g.hidden_size
    rows = -(-V // tpv)                                   # vocab shards are padded to equal rows
    rep = tpv == 1
    table = Cost(weights=rows * D * BF16, replicated=V * D * BF16 if rep else 0, unsharded=V * D * BF16)
    emb = dataclasses.replace(table, hbm=B * D * BF16 / tpv, layers=0)
    head = dataclasses.replace(table, hbm=rows * D * BF16, flops=2 * rows * D, layers=0)
    if g.tie_word_embeddings:
        head = dataclasses.replace(head, weights=0, replicated=0, unsharded=0)
    if tpv > 1:
        emb.comm, emb.collectives = _allreduce(B * D * BF16, tpv), 1
        head.comm, head.collectives = (tpv - 1) / tpv * B * V * BF16, 1           # all-gather of the logits
    return {"embeddings": emb, "norms": dataclasses.replace(_norms(g, plan, B, count=1), layers=0), "lm_head": head}


# ----------------------------------------------------------------------------- activations


def activation_bytes(g: Geometry, plan: Plan, seqs: int, tokens_per_seq: int, context: int,
                     logits_rows: int) -> dict[str, int]:
    """Peak transient bytes of one forward on one GPU, by what holds them: `seqs` sequences of
    `tokens_per_seq` new tokens each at `context` cached tokens (decode: B x 1; a prefill chunk: 1 x C).

    The streams (X in and out, N x D each) live across the whole layer; each sublayer adds its own
    working set (the largest of the model's sublayers counts); the logits are the forward's last.
    Sublayer sets follow this repo's implementation: KDA's z, f32 q/k/v/g, chunk U / W, o, gate; MLA's
    absorbed query and latent output in f32; the indexer's pools rebuilt in f32 from every cached row
    (gathered members, logits, softmax: impl/dsa.pool_keys) and its f32 scores; MoE rows routed here.
    """
    S, T, tp = seqs * tokens_per_seq, context, plan.tp
    D, N = g.hidden_size, g.hc_mult
    base = 2 * S * N * D * BF16 + 3 * S * D * BF16
    sub = {}
    if g.kda_layers:
        hd = g.kda_dim // tp
        sub["kda"] = S * hd * (3 * BF16 + 3 * F32 + F32 + 2 * F32 + F32 + BF16) + S * g.linear_num_heads // tp * F32
    if g.dsa_layers:
        H, rkv = g.num_attention_heads // tp, g.kv_lora_rank + g.qk_rope_head_dim
        mla = S * (g.q_lora_rank * BF16 + H * g.qk_nope_head_dim * BF16 + 2 * H * rkv * F32
                   + H * g.v_head_dim * BF16 + rkv * BF16)
        if g.full_indexer_layers:
            di, P = g.index_head_dim, -(-T // g.index_kpool)
            mla += (S * (g.index_n_heads * di * BF16 + g.index_n_heads * F32 + P * F32 + g.index_slots * INDEX)
                    + seqs * P * (3 * g.index_kpool * di * F32 + di * F32))
        sub["mla"] = mla
    if g.dense_layers:
        sub["dense_mlp"] = S * 3 * g.intermediate_size // tp * BF16
    if g.moe_layers:
        E, k = g.n_routed_experts, g.num_experts_per_tok
        rows = S * plan.attention_dp * k / plan.ep
        I = g.moe_intermediate_size // plan.expert_tp
        moe = S * 2 * E * F32 + rows * (3 * I * BF16 + D * F32) + S * 3 * g.shared_intermediate_size // tp * BF16
        if plan.attention_dp > 1:
            moe += 2 * rows * D * BF16
        sub["moe"] = int(moe)
    worst = max(sub, key=sub.get) if sub else None
    logits = logits_rows * -(-g.vocab_size // plan.vocab_tp) * F32 + S * D * BF16
    layer = base + (sub[worst] if worst else 0)
    return {"streams": base, "sublayer": sub.get(worst, 0), "sublayer_kind": worst, "logits": logits,
            "peak": max(layer, logits)}


# ----------------------------------------------------------------------------- the model


@dataclass
class Report:
    """The whole model's prediction (`model_cost`)."""

    geometry: Geometry
    plan: Plan
    batch: int
    context: int
    chunk: int
    terms: dict[str, Cost]
    activations: dict[str, dict]
    name: str = ""
    notes: list = field(default_factory=list)

    @property
    def total(self) -> Cost:
        out = Cost()
        for c in self.terms.values():
            out.add(dataclasses.replace(c, layers=0))
        return out

    def memory(self) -> dict:
        """The memory equation's terms (bytes per GPU)."""
        t = self.total
        act = max(a["peak"] for a in self.activations.values())
        states = self.batch * t.state_cache(self.context)
        return {"weights": t.weights, "state_per_seq": t.state, "cache_per_token": t.cache,
                "batch": self.batch, "context": self.context, "states_and_caches": states,
                "activations": act, "total": t.weights + states + act}

    def equation(self) -> str:
        m = self.memory()
        hb = human_bytes
        return (f"per-GPU memory = weights + B x (states + T x cache per token) + activations = "
                f"{hb(m['weights'])} + {self.batch} x ({hb(m['state_per_seq'])} + {self.context} x "
                f"{hb(m['cache_per_token'])}) + {hb(m['activations'])} = {hb(m['total'])}")

    def to_json(self) -> dict:
        mech = {}
        for key, c in self.terms.items():
            mech[key] = {"what": MECHANISMS[key], "layers": c.layers, "weights_bytes": c.weights,
                         "weights_replicated_bytes": c.replicated, "weights_unsharded_bytes": c.unsharded,
                         "state_bytes_per_seq": c.state, "cache_bytes_per_token": c.cache,
                         "state_cache_bytes_per_seq": c.state_cache(self.context),
                         "hbm_bytes_per_step": c.hbm, "hbm_bytes_per_token": c.hbm / self.batch,
                         "flops_per_token": c.flops, "comm_bytes_per_step": c.comm,
                         "collectives_per_step": c.collectives}
        t = self.total
        p = self.plan
        return {
            "prediction": True,
            "geometry": self.name, "geometry_fields": self.geometry.to_dict(),
            "plan": {"tp": p.tp, "ep": p.ep, "world": p.world, "expert_tp": p.expert_tp,
                     "attention_dp": p.attention_dp, "experts": p.experts, "vocab_parallel": p.vocab_parallel,
                     "describe": p.describe()},
            "batch": self.batch, "context": self.context, "prefill_chunk": self.chunk,
            "layers": {"kda": len(self.geometry.kda_layers), "dsa": len(self.geometry.dsa_layers),
                       "dsa_full_indexer": len(self.geometry.full_indexer_layers),
                       "dense": len(self.geometry.dense_layers), "moe": len(self.geometry.moe_layers)},
            "mechanisms": mech,
            "totals": {"weights_bytes": t.weights, "weights_replicated_bytes": t.replicated,
                       "state_cache_bytes_per_seq": t.state_cache(self.context),
                       "hbm_bytes_per_step": t.hbm, "hbm_bytes_per_token": t.hbm / self.batch,
                       "flops_per_token": t.flops, "comm_bytes_per_step": t.comm,
                       "collectives_per_step": t.collectives},
            "activations": self.activations,
            "memory": dict(self.memory(), equation=self.equation()),
            "notes": self.notes,
        }


def model_cost(g: Geometry, plan: Plan, batch: int = 1, context: int = 4096, chunk: int = 4096,
               name: str = "") -> Report:
    """Every MECHANISMS term summed over the geometry's layers, per GPU; activations of a decode step
    (batch x 1 token) and of a prefill chunk (1 x min(chunk, context) tokens ending at `context`)."""
    for n, v in (("batch", batch), ("context", context), ("chunk", chunk)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise CostError(f"{n}={v!r}: expected a positive int")
    terms = {k: Cost() for k in MECHANISMS}
    for key, c in _ends(g, plan, batch).items():
        terms[key].add(c)
    for i in range(g.num_hidden_layers):
        for key, c in layer_cost(g, plan, i, batch, context).items():
            terms[key].add(c)
    terms = {k: c for k, c in terms.items() if c != Cost()}
    C = min(chunk, context)
    acts = {"decode_step": activation_bytes(g, plan, batch, 1, context, batch),
            "prefill_chunk": activation_bytes(g, plan, 1, C, context, 1)}
    notes = []
    if C < chunk:
        notes.append(f"prefill chunk clamped to the context: {C} tokens")
    return Report(g, plan, batch, context, C, terms, acts, name, notes)


# ----------------------------------------------------------------------------- per layer kind


def resolve_geometry(geometry: Union[str, Path, Geometry]) -> tuple[Geometry, str]:
    """(Geometry, its name) from a preset name, a checkpoint directory / config.json, or a Geometry."""
    if isinstance(geometry, Geometry):
        return geometry, "geometry"
    s = str(geometry)
    try:
        if isinstance(geometry, Path) or "/" in s or s.endswith(".json"):
            return Geometry.from_pretrained(s), s
        return Geometry.preset(s), s
    except ConfigError as e:
        raise CostError(f"geometry: {e}") from None


def human_bytes(b: float) -> str:
    """Binary units, three significant figures; 0 as "-"."""
    if not b:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"


def human_flops(f: float) -> str:
    if not f:
        return "-"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(f) >= scale:
            return f"{f / scale:.3g} {unit}"
    return f"{f:.0f}"
