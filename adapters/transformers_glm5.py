"""transformers 5.23's glm5_next modules presented as a glmgate candidate (docs/adapters.md):

    glmgate gate --candidate adapters.transformers_glm5:Candidate

Each namespace function converts our containers (oracle/types.py) into the parameters of one
transformers module, whose sizes all come from those containers (adapters/_hf.py), runs that module,
and converts its outputs and states back. What transformers computes is what is judged.

Covered (the module run):
  kda.sublayer   Glm5NextTextLinearAttention, its KDA state through a DynamicCache (recurrent state and
                 conv window in and out); packed documents (cu_seqlens) one call per document
  mla.sublayer   Glm5NextTextAttention with its Glm5NextTextIndexer (full layers) or the previous layer's
                 top-k (shared layers); the latent cache and indexer rows in and out
  moe.route      Glm5NextTextTopkRouter;  moe.forward  Glm5NextTextMoE (router, eager experts, shared
                 expert);  moe.dense_mlp  Glm5NextTextMLP (the decoder's dense layers)
  mhc.reduce     Glm5NextTextHyperHead
  model.forward  Glm5NextForConditionalGeneration (adapters/_hf_model.py), our HybridState as its cache
Not covered (left out, so the fallback, NOT RUN or not covered report it; never imitated here):
  kda.recurrent / chunked / decode  transformers' chunk / recurrent kernels take already-projected,
                 gated inputs in another convention and are not the modules the model runs;
  mla.project / absorbed            the attention module exposes neither (it expands K/V, no absorption);
  dsa.index_rows / index            the indexer returns the top-k only: no scores, candidates or rows;
  mhc.coefficients / collapse       Glm5NextTextHyperConnection returns post, comb and the collapse but
                 consumes pre; write_back and expand are inline code of the decoder layer / text model;
  moe.experts / shared_expert       Glm5NextTextExperts and the shared Glm5NextTextMLP run inside
                 moe.forward; alone, only nvfp4.gate would call them, with NVFP4 experts, which
                 transformers' eager experts do not hold (moe.forward refuses nvfp4 for the same reason);
  model.deserialize (ours restores the HybridState the port returns), serving (ours, over our decoder).
Selections returned by mla.sublayer carry the indices only (transformers computes no more).

Precision islands (PRECISION, docs/adapters.md): transformers runs the router, mHC, the KDA core and
gate, the indexer scores and every RMSNorm in float32 whatever the parameters' dtype (SPEC §2), so at
--dtype float64 those functions are judged with the float32 contracts.
"""
from __future__ import annotations

from typing import Optional

import torch

from adapters import _hf
from adapters import _hf_cache as hc
from adapters._hf_model import Model
from oracle.types import DSACache, KDAState, Routing, Selection


def _ones(B: int, S: int, device) -> torch.Tensor:
    return torch.ones(B, S, dtype=torch.bool, device=device)


class KDA:
    """kda.sublayer over Glm5NextTextLinearAttention."""

    PRECISION = {"sublayer": "float32"}      # the KDA core, forget gate and gated norm run in float32
    SIZES = staticmethod(_hf.kda_sizes)

    @classmethod
    def _module(cls, w, dtype, device):
        cfg = _hf.config(**cls.SIZES(w))
        return cfg, _hf.loaded(_hf.build("Glm5NextTextLinearAttention", cfg, _hf.KDA_LAYER), _hf.named(w),
                               dtype, device)

    @classmethod
    def _one(cls, layer, cfg, x, state, mask):
        """One batch of rows through the module from `state` (None: empty): (y, KDAState)."""
        cache = hc.empty(cfg)
        cls._seed(cache, state)
        with torch.no_grad():
            y = layer(x, cache_params=cache, attention_mask=None if mask is None else mask.to(x.dtype))
        return y, cls._state(cache, x.dtype)

    @staticmethod
    def _seed(cache, state):
        hc.seed_kda(cache, _hf.KDA_LAYER, state)

    @staticmethod
    def _state(cache, dtype):
        return hc.kda_state(cache, _hf.KDA_LAYER, dtype)

    @classmethod
    def sublayer(cls, w, x, state=None, mask=None, cu_seqlens=None, *, ops=None):
        if x.ndim != 3:
            raise ValueError(f"x: expected [B, S, D], got shape {tuple(x.shape)}")
        cfg, layer = cls._module(w, x.dtype, x.device)
        if cu_seqlens is None:
            return cls._one(layer, cfg, x, state, mask)
        return cls._packed(layer, cfg, w, x, state, cu_seqlens)

    @classmethod
    def _packed(cls, layer, cfg, w, x, state, cu_seqlens):
        """transformers' module takes no cu_seqlens: each document is its own batch-1 call from its own
        state row (documents are independent by definition), outputs concatenated back."""
        cu = [int(c) for c in cu_seqlens.tolist()]
        ys, states = [], []
        for n in range(len(cu) - 1):
            row = None if state is None else KDAState(state.recurrent[n:n + 1], state.conv[n:n + 1])
            if cu[n + 1] == cu[n]:
                # an empty document: nothing runs, its state is what it was (zeros when it had none)
                ys.append(x[:, :0])
                states.append(row if row is not None else cls._zero_state(w, x))
                continue
            y, s = cls._one(layer, cfg, x[:, cu[n]:cu[n + 1]], row, None)
            ys.append(y)
            states.append(s)
        return torch.cat(ys, 1), KDAState(torch.cat([s.recurrent for s in states]), torch.cat([s.conv for s in states]))

    @staticmethod
    def _zero_state(w, x):
        H, K = w.num_heads, w.head_dim
        return KDAState(torch.zeros(1, H, K, K, device=x.device),
                        torch.zeros(1, 3 * H * K, w.conv_width, device=x.device, dtype=x.dtype))


class MLA:
    """mla.sublayer over Glm5NextTextAttention (+ its indexer on full layers)."""

    PRECISION = {"sublayer": "float32"}      # q/kv RMSNorms and the indexer scores run in float32
    SIZES = staticmethod(_hf.mla_sizes)

    @classmethod
    def sublayer(cls, w, iw, a, cache=None, mask=None, prev=None, kind="full", *, ops=None):
        full = cls._kind(kind, iw, prev)
        idx = _hf.FULL_LAYER if full else _hf.SHARED_LAYER
        cfg = _hf.config(**cls.SIZES(w, iw if full else None))
        tensors = _hf.named(w)
        if full:
            tensors.update(_hf.named(iw, "indexer."))
        layer = _hf.loaded(_hf.build("Glm5NextTextAttention", cfg, idx), tensors, a.dtype, a.device)
        if cache is not None and not isinstance(cache, DSACache):
            raise ValueError(f"cache: expected a DSACache or None, got {type(cache).__name__}")
        tf_cache = hc.empty(cfg)
        hc.seed_mla(tf_cache, idx, cache)
        B, S = a.shape[:2]
        m = _ones(B, S, a.device) if mask is None else mask.to(a.device).bool()
        with torch.no_grad():
            y, _, topk = layer(a, attention_mask=m, past_key_values=tf_cache,
                               prev_topk_indices=None if full else prev.indices)
        sel = prev if not full else Selection(topk.long(), None, None, None, None, None)
        return y, hc.dsa_cache(tf_cache, idx, full, iw if full else None), sel

    @staticmethod
    def _kind(kind, iw, prev) -> bool:
        if kind not in ("full", "shared"):
            raise ValueError(f"kind: expected 'full' or 'shared', got {kind!r}")
        if kind == "full" and iw is None:
            raise ValueError("iw: a full layer needs its IndexerWeights")
        if kind == "shared" and prev is None:
            raise ValueError("prev: a shared layer reuses the previous full layer's Selection")
        return kind == "full"


class MoE:
    """The MoE layer over Glm5NextTextMoE, its router alone, and the dense layers' Glm5NextTextMLP."""

    PRECISION = {"route": "float32", "forward": "float32"}     # the router runs in float32
    SIZES = staticmethod(_hf.moe_sizes)

    @classmethod
    def _module(cls, w, x):
        cfg = _hf.config(**cls.SIZES(w))
        return _hf.loaded(_hf.build("Glm5NextTextMoE", cfg), _hf.named(w), x.dtype, x.device)

    @classmethod
    def route(cls, w, x):
        with torch.no_grad():
            _, weights, ids = cls._module(w, x).gate(x)
        # the router returns its logits, weights and ids; the selection scores it masks are internal
        return Routing(ids.long(), weights.float(), None, None, None)

    @staticmethod
    def dense_mlp(w, x):
        cfg = _hf.config(hidden_size=int(w.gate_proj.shape[1]), intermediate_size=w.width,
                         swiglu_limit=w.swiglu_limit)
        mlp = _hf.loaded(_hf.build("Glm5NextTextMLP", cfg), _hf.named(w), x.dtype, x.device)
        with torch.no_grad():
            return mlp(x)

    @classmethod
    def forward(cls, w, x, nvfp4=None, w4a4=False, *, ops=None):
        if nvfp4 is not None:
            raise ValueError("nvfp4: transformers' eager Glm5NextTextExperts hold dequantized weights only")
        with torch.no_grad():
            return cls._module(w, x)(x)


class MHC:
    """mhc.reduce over Glm5NextTextHyperHead (the final unweighted mean of the streams)."""

    @staticmethod
    def reduce(X):
        if X.ndim != 4:
            raise ValueError(f"X: expected [B, S, N, D], got shape {tuple(X.shape)}")
        return _hf.modeling().Glm5NextTextHyperHead()(X)


class Mechanisms:
    """The mechanism namespaces only: the whole-decoder checks then run OUR decoder over transformers'
    sublayers, MoE and stream mean."""

    kda = KDA
    mla = MLA
    moe = MoE
    mhc = MHC


class Candidate(Mechanisms):
    """Every level: the mechanisms and transformers' whole model as the model port."""

    model = Model
