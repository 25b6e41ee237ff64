"""Serving-engine mutants: each an Engine (impl/serving.py) overriding ONE hook.

Caught by the check serving.state_machine (invariants/serving_checks.py), whose pinned programs
(EXAMPLES) drive each bug class to where it shows. registry.get("mutant:<name>") gives the Triton
implementation with the mutant class as its `serving` engine (factory returns the class: the check
builds it over its own model), so every mechanism stays the product's and only the engine is wrong.
"""
from __future__ import annotations

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
        return list(prompt) + [self.model.geometry.pad_token_id] * (S - n), [1] * n + [0] * (S - n)


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
