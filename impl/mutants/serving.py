"""Serving-engine mutants: each an Engine (impl/serving.py) overriding ONE hook.

Caught by the check serving.state_machine (invariants/serving_checks.py), whose pinned programs
(EXAMPLES) drive each bug class to where it shows. registry.get("mutant:<name>") gives the Triton
implementation with the mutant class as its `serving` engine (factory returns the class: the check
builds it over its own model), so every mechanism stays the product's and only the engine is wrong.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from impl import kda as ik
from impl.mutants.catalogue import mutant
from impl.serving import Engine
from oracle.types import DSACache, KDAState


def _engine_class(cls: type) -> type:
    return cls


@mutant("serving.state_machine", "state", factory=_engine_class, base="triton")
class ServingRollbackKeepsConvWindow(Engine):
    """Rollback restores the KDA recurrent state and DSA caches but keeps the post-speculation conv window."""

    def _restore(self, snapshot, current):
        s = snapshot.snapshot()
        s.layers = [KDAState(e.recurrent, c.conv) if isinstance(e, KDAState) else e
                    for e, c in zip(s.layers, current.layers)]
        return s


@mutant("serving.state_machine", "state", factory=_engine_class, base="triton")
class ServingForkAliasesBuffers(Engine):
    """Fork shares the donor's state object (and its in-place KDA buffers) instead of deep-copying."""

    def _fork_state(self, state):
        return state


@mutant("serving.state_machine", "state", factory=_engine_class, base="triton")
class ServingPrefixHitDropsIndexerRows(Engine):
    """A prefix-cache hit restores the latent caches but zeroed indexer rows."""

    def _prefix_state(self, state):
        state.layers = [DSACache(e.latent, e.index_rows * 0)
                        if isinstance(e, DSACache) and e.index_rows is not None else e for e in state.layers]
        return state


@mutant("serving.state_machine", "state", factory=_engine_class, base="triton")
class ServingPaddedStepsUpdateKdaState(Engine):
    """A padded batch prefill pads on the RIGHT: the pad steps after a short prompt decay the KDA state and shift zeros into the kept conv window."""

    def _pad(self, prompt, S):
        n = len(prompt)
        return list(prompt) + [self.model.geometry.pad_id] * (S - n), [1] * n + [0] * (S - n)


@mutant("serving.state_machine", "state", factory=_engine_class, base="triton")
class ServingSlotReuseKeepsState(Engine):
    """A cancelled request's slot goes uncleared to the next request admitted under its id: it continues the old KDA state, conv window and caches."""

    # the engine keeps freed slots for reuse (as paged engines keep blocks); overriding cancel is how it
    # learns one is free, _slot is where the clearing is forgotten
    def cancel(self, rid) -> None:
        self.__dict__.setdefault("_freed", {})[rid] = self._req(rid).state
        super().cancel(rid)

    def _slot(self, rid):
        return self.__dict__.get("_freed", {}).pop(rid, None) or super()._slot(rid)


@mutant("serving.state_machine", "state", factory=_engine_class, base="triton")
class ServingFirstChunkRoutedAsDecode(Engine):
    """A fresh request's first chunk of one token is routed as a decode, which reads its recycled slot's old state as if it were its own (vllm #51483)."""

    def _initial_state(self, req, n):
        if n == 1 and req.state.seq_len == 0 and req.slot:
            return type(req.state)(req.state.layer_types, list(req.slot), 0)
        return super()._initial_state(req, n)


@mutant("serving.state_machine", "state", factory=_engine_class, base="triton")
class ServingShortExtendDropsInitialState(Engine):
    """A prefill chunk after cached tokens that is shorter than a 64-token chunk runs its KDA layers from a zero state: has_initial_state AND-ed with the tracking mask (sglang #29368)."""

    def _initial_state(self, req, n):
        state = super()._initial_state(req, n)
        if state is None or not req.prompt or n >= 64:
            return state
        return type(state)(state.layer_types, [e.map(_zeros_like) if isinstance(e, KDAState) else e
                                               for e in state.layers], state.seq_len)


@mutant("serving.state_machine", "state", factory=_engine_class, base="triton")
class ServingFreshSlotTimesZero(Engine):
    """A fresh request's zero initial state is its recycled slot multiplied by 0, so NaN its previous owner left survives into it (the poisoned-slot inheritance of vllm #51483)."""

    def _initial_state(self, req, n):
        if req.state.seq_len or not req.slot:
            return super()._initial_state(req, n)
        return type(req.state)(req.state.layer_types, [None if e is None else e.map(lambda t: t * 0)
                                                       for e in req.slot], 0)


@mutant("serving.state_machine", "verify_logits", factory=_engine_class, base="triton")
class ServingVerifyConvFirstTokenOnly(Engine):
    """A verify row's KDA short conv takes the previous step's accepted count (one) as its own, so the row's draft positions read a zero conv output (vllm-ascend #15885; the verify-only collapse of vllm-ascend #15329)."""

    def _forward_packed(self, ids, cu, states, drafts):
        dropped = [(int(cu[i]) + 1, int(cu[i + 1])) for i, k in enumerate(drafts) if k]
        if not dropped:
            return super()._forward_packed(ids, cu, states, drafts)
        be = self.model.backend
        model = type(self.model)(self.model.weights, dataclasses.replace(be, kda=_RowsFellOut(be.kda, dropped)))
        return model.forward_packed(ids, cu, states)


class _RowsFellOut:
    """A kda namespace whose chunked core gets zero q, k, v (a zero post-conv output) at packed positions
    [s, e) of `dropped`: the rows the conv did not process."""

    def __init__(self, kda, dropped):
        self.kda, self.dropped = kda, dropped

    def __getattr__(self, name):
        return getattr(self.kda, name)

    def sublayer(self, w, x, state=None, mask=None, cu_seqlens=None):
        return ik.sublayer(w, x, state, mask, cu_seqlens, ops=self)

    def chunked(self, q, k, v, g, beta, *args, **kwargs):
        keep = torch.ones(q.shape[1], dtype=q.dtype, device=q.device)
        for s, e in self.dropped:
            keep[s:e] = 0
        keep = keep[None, :, None, None]                               # [1, T, 1, 1]
        return self.kda.chunked(q * keep, k * keep, v * keep, g, beta, *args, **kwargs)


def _zeros_like(a):
    return torch.zeros_like(a) if isinstance(a, torch.Tensor) else np.zeros_like(a)
