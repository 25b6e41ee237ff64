"""Whole-decoder mutants: each a ModelOps overriding ONE method.

A model namespace (impl/registry.py FUNCTIONS["model"]: forward, deserialize) over impl.model and
impl.state with ONE planted wiring bug; every mechanism namespace stays the torch baseline. No
per-mechanism check can see these: they live in how the decoder composes layers, masks and states
across calls. Caught by the model check (invariants/model_checks.py).
"""
from __future__ import annotations

import dataclasses

import torch

from impl import model as im
from impl.baseline.moe import compute_dtype
from impl.baseline.moe import moe as torch_moe
from impl.mutants.catalogue import mutant
from impl.state import HybridState
from oracle.config import SHARED
from oracle.types import DSACache, KDAState, Selection


class ModelOps:
    """impl.model.forward and impl.state.HybridState.deserialize as methods a model mutant overrides."""

    def forward(self, weights, input_ids, state=None, attention_mask=None, backend=None):
        return im.forward(weights, input_ids, state, attention_mask, backend)

    def deserialize(self, data, device="cpu"):
        return HybridState.deserialize(data, device=device)


class _StaleHandoff:
    """An mla namespace whose shared layers read a hand-off buffer that only multi-token calls refresh."""

    def __init__(self, mla, buffer: dict):
        self.mla, self.buffer = mla, buffer

    def __getattr__(self, name):
        return getattr(self.mla, name)

    def sublayer(self, w, iw, a, cache, mask, prev, kind):
        if kind == SHARED and a.shape[1] > 1:
            s = prev
            self.buffer[id(w)] = Selection(s.indices[:, -1:], s.scores[:, -1:], s.candidate[:, -1:], s.k_sel,
                                           s.pool_first, s.kept)
        elif kind == SHARED and id(w) in self.buffer:
            prev = self.buffer[id(w)]
        return self.mla.sublayer(w, iw, a, cache, mask, prev, kind)


@mutant("model.paths", "logits")
class ModelStaleSharedSelectionInDecode(ModelOps):
    """1-token decode hands the shared DSA layer the selection of the last PREFILL query, not the one its full layer just made."""

    # the wiring bug of a hand-off buffer that only multi-token calls refresh

    def __init__(self):
        self.buffer = {}

    def forward(self, weights, input_ids, state=None, attention_mask=None, backend=None):
        if state is None or state.seq_len == 0:
            self.buffer.clear()                    # a new sequence
        be = backend if backend is not None else im.backend_for("triton")
        return super().forward(weights, input_ids, state, attention_mask,
                               dataclasses.replace(be, mla=_StaleHandoff(be.mla, self.buffer)))


@mutant("model.paths", "kda_conv")
class ModelRestoreDropsConvWindow(ModelOps):
    """A deserialized state comes back with zeroed KDA conv windows (the prefix cache loses them)."""

    def deserialize(self, data, device="cpu"):
        s = super().deserialize(data, device)
        s.layers = [KDAState(e.recurrent, torch.zeros_like(e.conv)) if isinstance(e, KDAState) else e
                    for e in s.layers]
        return s


@mutant("model.paths", "valid_flags")
class ModelDecodeForgetsPadding(ModelOps):
    """A 1-token decode reads every cached token as real: the valid flags remembering left padding are reset to 1."""

    # SPEC §10: earlier padding lives in the caches, and a decode step must keep reading it there

    def forward(self, weights, input_ids, state=None, attention_mask=None, backend=None):
        if state is not None and input_ids.shape[1] == 1:
            state = state.snapshot()
            state.layers = [DSACache(e.latent, torch.cat([e.index_rows[..., :-1], torch.ones_like(
                e.index_rows[..., -1:])], -1)) if isinstance(e, DSACache) and e.index_rows is not None else e
                for e in state.layers]
        return super().forward(weights, input_ids, state, attention_mask, backend)


@mutant("model.paths", "logits")
class ModelMaskFirstColumns(ModelOps):
    """A multi-token call masks its S tokens with the FIRST S columns of a longer 2-D mask, not the last S (SPEC §3)."""

    # a continuation after left padding then treats its first real tokens as pads

    def forward(self, weights, input_ids, state=None, attention_mask=None, backend=None):
        S = input_ids.shape[1]
        if attention_mask is not None and S > 1 and attention_mask.shape[1] > S:
            attention_mask = attention_mask[:, :S]
        return super().forward(weights, input_ids, state, attention_mask, backend)


class _RoutedRowsExperts:
    """An moe namespace whose experts run one GEMM per expert over only the tokens routed to it."""

    def __init__(self, moe):
        self.moe = moe

    def __getattr__(self, name):
        return getattr(self.moe, name)

    def experts(self, w, x, routing, **kw):
        xs = x.reshape(-1, x.shape[-1])
        ids, wts = routing.expert_ids, routing.weights
        y = torch.zeros(xs.shape, dtype=compute_dtype(xs.dtype), device=x.device)
        for e in torch.unique(ids).tolist():
            n, slot = torch.nonzero(ids == e, as_tuple=True)
            y.index_add_(0, n, wts[n, slot, None].to(y.dtype) * torch_moe.expert(w, e, xs[n]).to(y.dtype))
        return y.to(x.dtype).reshape(x.shape)

    def forward(self, w, x, *args, **kw):
        routing = self.moe.route(w, x)
        record = getattr(self.moe, "record_experts", None)     # model.paths logs every MoE layer's choice
        if record is not None:
            record(routing.expert_ids)
        return self.experts(w, x, routing) + self.moe.shared_expert(w, x)


@mutant("model.causal", "causal", dtype="float32")
class ModelExpertGemmOverRoutedRows(ModelOps):
    """Each expert's GEMM runs over only the tokens routed to it, so its blocking (and a token's last bits) depends on how many later tokens chose that expert."""

    def forward(self, weights, input_ids, state=None, attention_mask=None, backend=None):
        be = backend if backend is not None else im.backend_for("triton")
        return super().forward(weights, input_ids, state, attention_mask, dataclasses.replace(be, moe=_RoutedRowsExperts(be.moe)))


# ---------------------------------------------------------------- the state hand-off (issue 13 item 5)
def _restored_kda(state, fn):
    """`state` with fn applied to every KDA layer's recurrent tensor (a restore that changes it)."""
    state.layers = [KDAState(fn(e.recurrent), e.conv) if isinstance(e, KDAState) else e for e in state.layers]
    return state


@mutant("model.paths", "handoff")
class ModelRestoreBf16Recurrent(ModelOps):
    """A restored snapshot's KDA recurrent state comes back rounded to bf16 where float32 is declared (sglang #33515)."""

    def deserialize(self, data, device="cpu"):
        return _restored_kda(super().deserialize(data, device), lambda r: r.to(torch.bfloat16).to(r.dtype))


@mutant("model.paths", "handoff")
class ModelRestoreTransposedKdaState(ModelOps):
    """A restored KDA recurrent state is read in the other layout, [V, K] for [K, V] (vllm #41292)."""

    def deserialize(self, data, device="cpu"):
        return _restored_kda(super().deserialize(data, device), lambda r: r.transpose(-1, -2).contiguous())


def _persisted_in_bf16(state) -> bool:
    """Whether every KDA recurrent value of a restored state is a bfloat16 value (a bf16-persisted
    snapshot; a float32 one is not, short of an all-zero state, where the layout cannot matter)."""
    return all(torch.equal(e.recurrent, e.recurrent.to(torch.bfloat16).to(e.recurrent.dtype))
               for e in state.layers if isinstance(e, KDAState))


@mutant("model.paths", "quantization")
class ModelRestoreBf16FormatTransposed(ModelOps):
    """Only the bf16-persisted snapshot format reads the KDA recurrent in the other layout, [V, K] for [K, V]; its own float32 format is right."""

    def deserialize(self, data, device="cpu"):
        s = super().deserialize(data, device)
        return _restored_kda(s, lambda r: r.transpose(-1, -2).contiguous()) if _persisted_in_bf16(s) else s
