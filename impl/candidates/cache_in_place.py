"""Issue 14 step 19's candidate: the MLA / DSA caches appended IN PLACE, in buffers with room to grow, instead
of copied whole every step (ours: `torch.cat`, impl.mla.append_rows). NOT yet timed on a GPU
(docs/optimization_log.md step 19).

A cache array of a batch-1 state is a view [:, :T] of a buffer [1, C, D] (C >= T, rounded up to
APPEND_BLOCK rows). Appending S rows writes them at [T, T + S) and returns the view [:, :T + S], so a
decode step moves S rows, not T. The old view still reads its own T rows (nothing below T is written),
so the state stays a value to everyone holding it, with ONE rule: only the buffer's TIP may be written
past. The buffer remembers the length of the longest view handed out (its tip); a view shorter than the
tip (a fork's second branch, a state rolled back by truncate and stepped again) would overwrite rows
another view reads, so it is copied into a fresh buffer instead, as ours copies every time. (The mutant
`mla_cache_in_place_without_the_tip_rule` drops the rule.) Batches of several rows are copied as ours
(a view [:, :T] of [B, C, D] is not contiguous: every kernel would take a copy anyway).

The namespaces bring the seam `mla.append_rows` (impl.registry.SEAMS) and the DSA pooled-key cache's
`pooled_rows` (the append kernel writes its new rows into the grown buffer), with ours' `index_pooled`
beside it (an optional function a candidate brings or loses: without it the selection would pool again):

    python3 -m gate.cli gate --candidate impl.candidates.cache_in_place:Candidate --baseline triton \\
        --check mla.paths --check mla.causal --check dsa.pooled --check model.paths --check model.causal \\
        --check serving.state_machine
"""
from __future__ import annotations

import types

import torch

from impl import dsa as _dsa
from impl import mla as _mla

# a fresh buffer's capacity: the rows needed rounded up to a multiple of this (at most APPEND_BLOCK - 1
# spare rows a cache array; a decode step copies once every APPEND_BLOCK steps)
APPEND_BLOCK = 256
_TIP = "_glmgate_tip"          # the buffer's attribute: the length of the longest view handed out


def _grown(old, T: int, like, tip_rule: bool = True):
    """A view [B, T, D] whose first old.shape[1] rows are `old`'s (None: 0 rows), in `like`'s dtype and
    device: in place past the tip of old's buffer where the rule allows, else in a fresh buffer.
    tip_rule False plants the bug the rule prevents (any view with room is written past)."""
    T0 = 0 if old is None else old.shape[1]
    B, D = like.shape[0], like.shape[-1]
    if old is not None and B == 1 and old.dtype == like.dtype and old.device == like.device:
        base = old if old._base is None else old._base
        at_tip = getattr(base, _TIP, None) == T0 or not tip_rule
        if (at_tip and base.ndim == 3 and base.shape[0] == 1 and base.shape[1] >= T
                and old.data_ptr() == base.data_ptr() and old.stride() == base.stride()):
            setattr(base, _TIP, T)
            return base[:, :T]
    cap = -(-T // APPEND_BLOCK) * APPEND_BLOCK if B == 1 else T
    buf = torch.empty(B, cap, D, dtype=like.dtype, device=like.device)
    if T0:
        buf[:, :T0] = old
    setattr(buf, _TIP, T)
    return buf[:, :T]


def append_rows(old, new, name: str, tip_rule: bool = True):
    """impl.mla.append_rows written in place past the tip of old's buffer (see the module docstring)."""
    if old is not None:
        _mla.check_append(old, new, name)
    T0 = 0 if old is None else old.shape[1]
    out = _grown(old, T0 + new.shape[1], new, tip_rule)
    out[:, T0:] = new
    return out


def pooled_rows(packed, ape, kpool: int, pooled=None):
    """impl.dsa.pooled_rows with the cache grown in place past its buffer's tip (the append kernel writes
    rows [T0, T) into it)."""
    B, T, K, _, first = _dsa.pool_anchor(packed, ape, kpool)
    if pooled is not None:
        _dsa._check_pooled(pooled, B, T, K)
    T0 = 0 if pooled is None else pooled.shape[1]
    out = _grown(pooled, T, packed.new_empty(B, 0, K + 1))
    return _dsa.pooled_rows_into(packed, ape, kpool, out, T0, first)


def bench_state(cache):
    """For a benchmark that replays ONE decode step from one state (scripts/profile_replay.py --peer): the
    state with each DSA cache array moved into a buffer with room, and a function that marks them their
    buffers' tips again, called before each step it runs eagerly or captures. Replays then write the
    step's rows in place every time, as an engine's steady state does (each step's state is the last
    step's tip); without it every step from the same state would be a sibling branch, copied."""
    from oracle.types import DSACache
    if not isinstance(cache, DSACache):
        return cache, lambda: None
    moved = DSACache(*(None if a is None else append_rows(None, a, name) for a, name in zip(cache, cache._fields)))

    def rewind():
        for a in moved:
            if a is not None and a._base is not None:
                setattr(a._base, _TIP, a.shape[1])
    return moved, rewind


Candidate = types.SimpleNamespace(
    mla=types.SimpleNamespace(append_rows=append_rows),
    dsa=types.SimpleNamespace(pooled_rows=pooled_rows, index_pooled=_dsa.index_pooled))
