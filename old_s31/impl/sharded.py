"""The decoder tensor- and expert-parallel over `world` ranks of torch.distributed (SPEC §3, §5-§9, §10).

How GLM-5.3-Flash is served, and where its sharding bugs live (issue 15). Every rank runs the same
composition (oracle.decoder.Decoder over the implementation's namespaces) on its shard of the weights:

    KDA (SPEC §6)   heads split: q/k/v_proj rows, the conv1d channels of q | k | v (each third cut by
                    heads), f_b_proj rows, dt_bias, A_log, b_proj rows, g_b_proj rows, o_proj columns;
                    f_a_proj, g_a_proj (rank-K low-rank inputs) and o_norm (one [d] weight for every
                    head) replicated. Its state: recurrent [B, H/world, d, d], conv window of its channels.
    MLA (SPEC §7)   heads split: q_b_proj and kv_b_proj rows, o_proj columns, num_heads = H / world.
                    REPLICATED: q_a_proj (+ norm), the latent kv_a_proj_with_mqa (+ norm) and the whole
                    DSA indexer (SPEC §8): every rank computes the same latent cache and the same
                    selection, so no rank ever waits for another's top-k (the choice this module makes;
                    the latent is shared by all heads, so splitting it would need a gather anyway).
                    o_proj's bias (attention_bias) is added on rank 0 only: the sum adds it once.
    MoE (SPEC §9.3) experts split expert-parallel: every rank routes every token over all E experts
                    (router replicated) and computes only the contributions of its E / world experts;
                    the shared expert tensor-parallel along F. Dense MLP: tensor-parallel along F.
    replicated      embeddings, mHC (both instances), every RMSNorm, the final norm, lm_head.

Each attention and each MLP sublayer thus yields a PARTIAL output per rank; it is all-reduced (sum, in
float32 whatever the working dtype, then cast back) before the mHC write-back (the residual), so the
streams, and everything computed from them, are the same on every rank. The sharded KDA state is
gathered (all_gather along heads / conv channels) back to the whole model's HybridState layout after
each forward, and a whole-model state is sliced to each rank's shard before one.

`ShardedOps` is the plan (how weights and states are cut, how partials are summed) and, as a model
namespace (impl/registry.py FUNCTIONS["model"]), the unsharded forward; a sharded mutant
(impl/mutants/sharded.py) overrides ONE of its methods. impl/sharded_pool.py runs the ranks.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import numpy as np
import torch

from impl import model as im
from impl.state import HybridState
from oracle.config import DENSE, LINEAR, SHARED, Geometry
from oracle.types import DenseMLPWeights, KDAState, KDAWeights, MLAWeights, MoEWeights, Routing, Weights

__all__ = ["ShardingError", "ShardedOps", "MoEShard", "ShardedDecoder", "check_world", "shard_weights",
           "shard_state", "gather_state"]


class ShardingError(ValueError):
    """A geometry that cannot be cut over `world` ranks (names the dimension and its config field)."""


def check_world(g: Geometry, world) -> None:
    """Raise ShardingError unless every dimension this plan splits divides by `world` (only the layer
    kinds the schedule has: a model without MoE layers does not need E % world == 0)."""
    if isinstance(world, bool) or not isinstance(world, (int, np.integer)) or world < 1:
        raise ShardingError(f"world: {world!r}, expected an integer >= 1 (ranks)")
    dims = []
    if LINEAR in g.layer_types:
        dims.append(("KDA heads", g.linear_num_heads, "linear_num_heads"))
    if any(t != LINEAR for t in g.layer_types):
        dims.append(("MLA heads", g.num_attention_heads, "num_attention_heads"))
    if DENSE in g.mlp_layer_types:
        dims.append(("the dense MLP's width F", g.intermediate_size, "intermediate_size"))
    if any(t != DENSE for t in g.mlp_layer_types):
        dims.append(("routed experts", g.n_routed_experts, "n_routed_experts"))
        if g.n_shared_experts:
            dims.append(("the shared expert's width F", g.moe_intermediate_size * g.n_shared_experts,
                         "moe_intermediate_size * n_shared_experts"))
    for what, n, field in dims:
        if n % world:
            raise ShardingError(f"{what}: {n} ({field}) is not divisible by world = {world}")
    if any(t != DENSE for t in g.mlp_layer_types):
        local, need = g.n_routed_experts // world, max(2, g.num_experts_per_tok)
        if local < need:
            # each rank runs its experts as an MoE of E/world experts that takes k slots a token
            raise ShardingError(f"routed experts per rank: {local} (n_routed_experts / world = "
                                f"{g.n_routed_experts} / {world}) is below {need} (max(2, num_experts_per_tok))")


class MoEShard(NamedTuple):
    """One rank's MoE layer (SPEC §9.3, expert parallel).

    router: the replicated routing weights (router, correction bias, top-k and group settings over all
        E experts); its expert tensors are shape-only placeholders: routing never reads them
    local: this rank's experts as an MoE of E / world experts (n_group 1: the groups were applied when
        routing) and its F-slice of the shared expert
    first: the global id of local expert 0 (the expert map's rank · E / world)
    """

    router: MoEWeights
    local: MoEWeights
    first: int


def _placeholder(a: torch.Tensor) -> torch.Tensor:
    """A tensor of a's shape holding one element (stride 0): the shape validation sees E experts, no
    rank stores the others' weights."""
    return a.new_zeros(()).expand(a.shape)


class ShardedOps:
    """The sharding plan (how each rank cuts weights and state, how partials are summed) and, as a
    model namespace, the unsharded forward (impl.model.forward) and deserialize."""

    # ------------------------------------------------------------------ the model namespace

    def forward(self, weights, input_ids, state=None, attention_mask=None, backend=None):
        return im.forward(weights, input_ids, state, attention_mask, backend)

    def deserialize(self, data, device="cpu"):
        return HybridState.deserialize(data, device=device)

    # ------------------------------------------------------------------ heads and widths

    def heads(self, n: int, rank: int, world: int) -> slice:
        """The rank's contiguous block of n heads (or of any dimension split in rank order)."""
        m = n // world
        return slice(rank * m, (rank + 1) * m)

    def kda_channels(self, H: int, K: int, rank: int, world: int) -> torch.Tensor:
        """The rank's conv1d channels (SPEC §6.3: q | k | v concatenated, each head-major): its heads'
        block in each third, in q, k, v order (so split(c, 3) on the rank gives its q, k, v)."""
        h = self.heads(H, rank, world)
        block = torch.arange(h.start * K, h.stop * K)
        return torch.cat([block + part * H * K for part in range(3)])

    # ------------------------------------------------------------------ KDA (SPEC §6)

    def kda_gates(self, w: KDAWeights, heads: slice):
        """(dt_bias [h·d], A_log [h]) of the rank's heads: per-head gate parameters go with their heads."""
        K = w.head_dim
        return w.dt_bias[heads.start * K:heads.stop * K], w.A_log[heads]

    def kda(self, w: KDAWeights, rank: int, world: int) -> KDAWeights:
        """SPEC §6 on the rank's H / world heads (the shapes of SPEC §11, per head)."""
        H, K = w.num_heads, w.head_dim
        h = self.heads(H, rank, world)
        rows = slice(h.start * K, h.stop * K)
        dt_bias, a_log = self.kda_gates(w, h)
        ch = self.kda_channels(H, K, rank, world).to(w.conv1d.device)
        # f_a_proj / g_a_proj (the rank-K inputs of the low-rank gates) and o_norm (one [d] weight for all
        # heads) are replicated; o_proj is cut by columns: each rank's output is a partial sum over heads
        return dataclasses.replace(
            w, q_proj=w.q_proj[rows], k_proj=w.k_proj[rows], v_proj=w.v_proj[rows], conv1d=w.conv1d[ch],
            f_b_proj=w.f_b_proj[rows], dt_bias=dt_bias, A_log=a_log, b_proj=w.b_proj[h],
            g_b_proj=w.g_b_proj[rows], o_proj=w.o_proj[:, rows])

    # ------------------------------------------------------------------ MLA + DSA (SPEC §7, §8)

    def o_bias(self, bias, rank: int):
        """o_proj's bias on this rank: rank 0 adds it, the others None (the all-reduce then adds it once)."""
        return bias if rank == 0 else None

    def mla(self, w: MLAWeights, rank: int, world: int) -> MLAWeights:
        """SPEC §7 on the rank's H / world heads; q_a, the latent kv_a and their norms whole."""
        H, dn, dv = w.num_heads, w.nope_dim, w.v_dim
        h = self.heads(H, rank, world)
        per = dn + dv                                  # kv_b_proj: per head d_n key rows, then d_v value rows
        return dataclasses.replace(
            w, q_b_proj=w.q_b_proj[h.start * dn:h.stop * dn], kv_b_proj=w.kv_b_proj[h.start * per:h.stop * per],
            o_proj=w.o_proj[:, h.start * dv:h.stop * dv], num_heads=h.stop - h.start,
            o_bias=None if w.o_bias is None else self.o_bias(w.o_bias, rank))

    def indexer(self, iw, rank: int, world: int):
        """The DSA indexer: replicated (every rank selects the same pools from the same scores)."""
        return iw

    # ------------------------------------------------------------------ MLPs (SPEC §9)

    def dense(self, w: DenseMLPWeights, rank: int, world: int) -> DenseMLPWeights:
        """A clamped-SwiGLU MLP cut along F: gate/up rows, down columns (the activation is per column)."""
        f = self.heads(w.width, rank, world)
        return DenseMLPWeights(w.gate_proj[f], w.up_proj[f], w.down_proj[:, f], w.swiglu_limit)

    def expert_slice(self, E: int, rank: int, world: int) -> slice:
        """The experts whose weights this rank loads (the weight loader's side of the expert map)."""
        return self.heads(E, rank, world)

    def moe(self, w: MoEWeights, rank: int, world: int) -> MoEShard:
        """SPEC §9.3 expert-parallel: the replicated router, the rank's experts, its F-slice of the shared one."""
        if w.nvfp4 is not None:
            raise ShardingError("MoEWeights.nvfp4: sharding NVFP4 experts is not implemented (load the "
                                "dequantized weights: impl.weights.to_torch(..., nvfp4=False))")
        E = w.num_experts
        e = self.expert_slice(E, rank, world)
        shared = {}
        if w.shared is not None:
            s = self.dense(w.shared, rank, world)
            shared = dict(shared_gate_proj=s.gate_proj, shared_up_proj=s.up_proj, shared_down_proj=s.down_proj)
        # the local router rows and bias are never routed with (router is): experts() validates their shapes
        local = dataclasses.replace(w, router=w.router[e], e_score_correction_bias=w.e_score_correction_bias[e],
                                    gate_up_proj=w.gate_up_proj[e], down_proj=w.down_proj[e], n_group=1,
                                    topk_group=1, **shared)
        router = dataclasses.replace(w, gate_up_proj=_placeholder(w.gate_up_proj), down_proj=_placeholder(w.down_proj),
                                     shared_gate_proj=None, shared_up_proj=None, shared_down_proj=None)
        # the router's side of the expert map: global id g lives on rank g // (E / world)
        return MoEShard(router, local, rank * (E // world))

    # ------------------------------------------------------------------ the reduction

    def all_reduce(self, y: torch.Tensor, sublayer: str) -> torch.Tensor:
        """A sublayer's partial output summed over the ranks in float32 (then its dtype), before the
        residual write-back; sublayer: "attention" or "mlp"."""
        import torch.distributed as dist
        if not dist.is_initialized() or dist.get_world_size() == 1:
            return y
        t = y.float().contiguous()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.to(y.dtype)


def plan_of(impl) -> ShardedOps:
    """The implementation's sharding plan: its model namespace when that is one (a sharded mutant),
    else the default."""
    ops = getattr(impl, "model", None)
    ops = vars(ops).get("_ns", ops) if hasattr(ops, "__dict__") else ops      # under a recording proxy
    return ops if isinstance(ops, ShardedOps) else ShardedOps()


# ---------------------------------------------------------------------------- weights and state


def shard_weights(weights: Weights, rank: int, world: int, plan: Optional[ShardedOps] = None) -> Weights:
    """Rank `rank`'s shard of torch Weights (see the module docstring); world 1 gives every tensor whole."""
    check_world(weights.geometry, world)
    if not 0 <= rank < world:
        raise ShardingError(f"rank: {rank}, expected 0 <= rank < world = {world}")
    plan = plan or ShardedOps()
    layers = []
    for lw in weights.layers:
        if lw.attention == LINEAR:
            lw = dataclasses.replace(lw, kda=plan.kda(lw.kda, rank, world))
        else:
            lw = dataclasses.replace(lw, mla=plan.mla(lw.mla, rank, world),
                                     indexer=None if lw.indexer is None else plan.indexer(lw.indexer, rank, world))
        mlp = plan.moe(lw.mlp, rank, world) if isinstance(lw.mlp, MoEWeights) else plan.dense(lw.mlp, rank, world)
        layers.append(dataclasses.replace(lw, mlp=mlp))
    return dataclasses.replace(weights, layers=tuple(layers))


def _kda_dims(e: KDAState) -> tuple[int, int]:
    return int(e.recurrent.shape[1]), int(e.recurrent.shape[2])


def shard_state(state: Optional[HybridState], rank: int, world: int, plan: Optional[ShardedOps] = None,
                heads: Optional[int] = None):
    """The rank's slice of a whole-model state: KDA recurrent [B, H/world, d, d] and the conv window's
    channels of its heads (plan.kda_channels); the DSA caches whole (replicated)."""
    if state is None:
        return None
    plan = plan or ShardedOps()
    layers = []
    for e in state.layers:
        if isinstance(e, KDAState):
            H, K = _kda_dims(e)
            ch = plan.kda_channels(H, K, rank, world).to(e.conv.device)
            e = KDAState(e.recurrent[:, plan.heads(H, rank, world)].contiguous(), e.conv[:, ch].contiguous())
        layers.append(e)
    return HybridState(state.layer_types, layers, state.seq_len)


def gather_state(local: HybridState, rank: int, world: int, H: int, plan: Optional[ShardedOps] = None) -> HybridState:
    """The whole-model state from every rank's shard (all_gather; each rank ends with all of it): KDA
    heads and conv channels put back where plan.heads / plan.kda_channels took them; DSA caches as they
    are (replicated). H: the KDA heads of the whole model."""
    import torch.distributed as dist
    if world == 1:
        return local
    plan = plan or ShardedOps()
    layers = []
    for e in local.layers:
        if isinstance(e, KDAState):
            K = int(e.recurrent.shape[2])
            rec, conv = ([torch.empty_like(t) for _ in range(world)] for t in (e.recurrent, e.conv))
            dist.all_gather(rec, e.recurrent.contiguous())
            dist.all_gather(conv, e.conv.contiguous())
            B, W = e.conv.shape[0], e.conv.shape[-1]
            full_rec = e.recurrent.new_empty(B, H, *e.recurrent.shape[2:])
            full_conv = e.conv.new_empty(B, 3 * H * K, W)
            for r in range(world):
                full_rec[:, plan.heads(H, r, world)] = rec[r]
                full_conv[:, plan.kda_channels(H, K, r, world).to(e.conv.device)] = conv[r]
            e = KDAState(full_rec, full_conv)
        layers.append(e)
    return HybridState(local.layer_types, layers, local.seq_len)


# ---------------------------------------------------------------------------- the decoder


def _host(a) -> np.ndarray:
    return a.detach().to("cpu", torch.int64).numpy()


class ShardedDecoder(im.TorchDecoder):
    """oracle.decoder.Decoder on one rank: the rank's shard of every sublayer, then the all-reduce
    (SPEC §5: before the mHC write-back). Its forward takes the rank's Weights shard (shard_weights) and
    state shard (shard_state); `log` receives, per forward, the discrete decisions it took in layer order
    (("selection", [B, S, W]) per full DSA layer, ("experts", [B·S, k]) per MoE layer), as
    invariants/model_checks.py's recording namespaces log them."""

    def __init__(self, backend=None, device="cpu", dtype: torch.dtype = torch.float32,
                 plan: Optional[ShardedOps] = None):
        super().__init__(backend, device, dtype)
        self.plan = plan or plan_of(self.impl)
        self.log: list = []

    def forward(self, weights, input_ids, state=None, attention_mask=None, decisions=None, trace=None):
        if decisions is not None or trace is not None:
            raise ValueError("ShardedDecoder: forced decisions and traces are the unsharded decoder's (impl.model)")
        return super().forward(weights, input_ids, state, attention_mask)

    def attention(self, lw, a, docs, decision, own):
        y, caches, sels = super().attention(lw, a, docs, decision, own)
        if lw.attention != LINEAR and lw.indexer_type != SHARED:
            self.log += [("selection", _host(s.indices)) for s in sels if s is not None]
        return self.plan.all_reduce(y, "attention"), caches, sels

    def mlp(self, lw, g, a, decision, traced: bool):
        if isinstance(lw.mlp, MoEShard):
            y, routing = self._moe(lw.mlp, a)
        else:
            y, routing = self.impl.moe.dense_mlp(lw.mlp, a), None
        return self.plan.all_reduce(y, "mlp"), routing if traced else None

    def _moe(self, shard: MoEShard, a):
        """SPEC §9.3 expert-parallel: route over all E, then only the local experts' contributions (a slot
        routed elsewhere runs with weight 0 on local expert 0: the grouped kernels take no "skip" id) plus
        this rank's F-slice of the shared expert; the all-reduce sums the rest in."""
        moe = self.impl.moe
        r = moe.route(shard.router, a)
        self.log.append(("experts", _host(r.expert_ids)))
        n = shard.local.num_experts
        mine = (r.expert_ids >= shard.first) & (r.expert_ids < shard.first + n)
        local = Routing(torch.where(mine, r.expert_ids - shard.first, 0), torch.where(mine, r.weights, 0.0),
                        r.scores, r.biased, r.group_scores)
        return moe.experts(shard.local, a, local) + moe.shared_expert(shard.local, a), r
