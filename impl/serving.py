"""A minimal serving engine over a Model (oracle.model.Model or impl.model.Model), batch 1 per request.

Each request holds a HybridState, its token history (tokens the state covers) and the logits row of its
last token. Like a CUDA-graph serving engine, a request's KDA buffers (recurrent, conv window) are
persistent slots updated IN PLACE after every forward (DSA caches grow, so they are replaced); snapshots
and forks must therefore deep-copy, or later steps of one branch reach the other.

Scenario operations: admit, prefill_chunk, decode, speculate / accept (rollback is restore + replay),
fork (prefix-cache hit), cancel; `step` advances several requests in ONE packed forward (a flat token
stream cut by cu_seqlens: prefill chunks, 1-token decode rows, zero-length rows), `admit_padded`
prefills several new requests as ONE left-padded batch and splits the batch state per request. The
small `_restore`, `_fork_state`, `_prefix_state`, `_pad` hooks are what the serving mutants
(impl/mutants/serving.py) override, one each.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import numpy as np

from oracle.types import KDAState

__all__ = ["Engine", "Request"]


def _write(dst, src) -> None:
    """dst[...] = src in place (torch tensor or NumPy array)."""
    if isinstance(dst, np.ndarray):
        np.copyto(dst, np.asarray(src, dtype=dst.dtype))
    else:
        dst.copy_(src)


@dataclasses.dataclass
class Request:
    rid: Any
    prompt: list                       # tokens not yet fed (pending prefill)
    state: Any                         # HybridState covering `history`
    history: list                      # tokens the state covers
    logits: Any = None                 # logits row [V] of the last history token (None while empty)
    spec: Optional[tuple] = None       # (snapshot state, snapshot logits, draft tokens) during speculation


class Engine:
    """Per-request HybridStates and histories over one model (see module docstring)."""

    def __init__(self, model):
        self.model = model
        self.requests: dict = {}

    # ------------------------------------------------------------------ hooks (one per mutant)

    def _restore(self, snapshot, current):
        """The state to continue from after a rejected speculation: recurrent + conv + DSA caches of
        `snapshot` (copied; `current` is the post-speculation state and is discarded)."""
        return snapshot.snapshot()

    def _fork_state(self, state):
        """An independent copy of `state` for a new branch (must deep-copy)."""
        return state.fork()

    def _slot(self, rid):
        """The state a newly admitted request starts from: an empty one (a reused id or slot must not
        inherit anything of what it held before)."""
        return self.model.new_state()

    def _prefix_state(self, state):
        """The state a prefix-cache hit starts from, given the (copied) donor state."""
        return state

    def _pad(self, prompt: list, S: int) -> tuple[list, list]:
        """(ids row, mask row) of `prompt` in a padded batch of width S: LEFT padding (SPEC §3), so
        the pads precede every real token and leave the request's KDA state untouched."""
        n = len(prompt)
        return [self.model.geometry.pad_token_id] * (S - n) + list(prompt), [0] * (S - n) + [1] * n

    # ------------------------------------------------------------------ internals

    def _req(self, rid) -> Request:
        try:
            return self.requests[rid]
        except KeyError:
            raise KeyError(f"request {rid!r} is not live") from None

    def _run(self, req: Request, tokens: Sequence[int]):
        """Forward `tokens` from req.state; commit the new state in place; return the last logits row."""
        ids = np.asarray([list(tokens)], dtype=np.int64)
        state = None if req.state.seq_len == 0 else req.state
        logits, new = self.model.forward(ids, state=state)
        self._commit(req, new)
        req.history.extend(int(t) for t in tokens)
        req.logits = logits[0, -1]
        return req.logits

    def _commit(self, req: Request, new) -> None:
        old, layers = req.state, []
        for o, n in zip(old.layers, new.layers):
            if isinstance(o, KDAState) and isinstance(n, KDAState) and tuple(o.recurrent.shape) == \
                    tuple(n.recurrent.shape) and tuple(o.conv.shape) == tuple(n.conv.shape):
                _write(o.recurrent, n.recurrent)          # persistent slot buffers
                _write(o.conv, n.conv)
                layers.append(o)
            else:
                layers.append(n)
        req.state = type(new)(new.layer_types, layers, new.seq_len)

    # ------------------------------------------------------------------ API

    def admit(self, rid, prompt: Sequence[int]) -> None:
        if rid in self.requests:
            raise ValueError(f"request {rid!r} already live")
        if len(prompt) == 0:
            raise ValueError("empty prompt")
        self.requests[rid] = Request(rid, [int(t) for t in prompt], self._slot(rid), [])

    def pending(self, rid) -> int:
        """Prompt tokens not yet prefilled."""
        return len(self._req(rid).prompt)

    def prefill_chunk(self, rid, n: int):
        """Feed the next min(n, pending) prompt tokens; returns the last logits row."""
        req = self._req(rid)
        if req.spec is not None:
            raise RuntimeError("prefill during speculation")
        chunk, req.prompt = req.prompt[:n], req.prompt[n:]
        if not chunk:
            return req.logits
        return self._run(req, chunk)

    def decode(self, rid, token: int):
        req = self._req(rid)
        if req.prompt or req.spec is not None:
            raise RuntimeError(f"decode on request {rid!r} with pending prompt or open speculation")
        return self._run(req, [token])

    def speculate(self, rid, draft_tokens: Sequence[int]) -> None:
        """Snapshot, then run the draft (verify pass); accept() must follow."""
        req = self._req(rid)
        if req.prompt or req.spec is not None or not draft_tokens:
            raise RuntimeError(f"speculate on request {rid!r}: pending prompt, open speculation or empty draft")
        snap, logits, n = req.state.snapshot(), req.logits, len(req.history)
        self._run(req, draft_tokens)
        del req.history[n:]                            # the draft is not committed yet
        req.spec = (snap, logits, [int(t) for t in draft_tokens])

    def accept(self, rid, a: int):
        """Keep the first a draft tokens: restore the snapshot and replay them."""
        req = self._req(rid)
        if req.spec is None:
            raise RuntimeError(f"accept on request {rid!r} without speculation")
        snap, logits, draft = req.spec
        if not 0 <= a <= len(draft):
            raise ValueError(f"accept: a={a} not in [0, {len(draft)}]")
        req.spec = None
        req.state, req.logits = self._restore(snap, req.state), logits
        if a:
            self._run(req, draft[:a])
        return req.logits

    def fork(self, src_rid, new_rid) -> None:
        """Prefix-cache hit: new_rid starts from a copy of src's state and history (no pending prompt)."""
        src = self._req(src_rid)
        if new_rid in self.requests:
            raise ValueError(f"request {new_rid!r} already live")
        if src.spec is not None:
            raise RuntimeError("fork during speculation")
        self.requests[new_rid] = Request(new_rid, [], self._prefix_state(self._fork_state(src.state)),
                                         list(src.history), src.logits)

    def step(self, rows: Sequence[tuple]) -> list:
        """SERVING.md P4: advance several requests in ONE packed forward.

        rows: (rid, tokens) pairs, tokens may be empty (scheduled, nothing to feed). A request with a
        pending prompt must be given its next prompt tokens (a prefill chunk); otherwise the tokens are
        decode / continuation tokens. Every row is checked before anything runs, so a bad row (rid not
        live, named twice, open speculation) leaves every request as it was. Returns each row's last
        logits row (unchanged for an empty row).
        """
        reqs, feeds = self._step_rows(rows)
        if not any(feeds):
            return [r.logits for r in reqs]
        cu = np.cumsum([0] + [len(f) for f in feeds])
        ids = np.asarray([t for f in feeds for t in f], dtype=np.int64)
        states = [None if r.state.seq_len == 0 else r.state for r in reqs]
        logits, new = self.model.forward_packed(ids, cu, states)
        for i, (req, feed) in enumerate(zip(reqs, feeds)):
            # zero-length rows commit too: their state came back through the kernels and must be unchanged
            self._commit(req, new[i])
            if feed:
                del req.prompt[:len(feed)]
                req.history.extend(feed)
                req.logits = logits[int(cu[i + 1]) - 1]
        return [r.logits for r in reqs]

    def _step_rows(self, rows) -> tuple[list, list]:
        """The live Request and the token list of every row; raises on a bad row before any change."""
        reqs, feeds, seen = [], [], set()
        for j, row in enumerate(rows):
            try:
                rid, tokens = row
            except (TypeError, ValueError):
                raise ValueError(f"step: row {j} is {row!r}, expected a (rid, tokens) pair") from None
            req = self._req(rid)
            if rid in seen:
                raise ValueError(f"step: request {rid!r} appears in two rows of one batch")
            seen.add(rid)
            if req.spec is not None:
                raise RuntimeError(f"step on request {rid!r} during speculation (accept first)")
            feed = [int(t) for t in tokens]
            if req.prompt and feed != req.prompt[:len(feed)]:
                raise ValueError(f"step: request {rid!r} has {len(req.prompt)} pending prompt tokens; its row "
                                 f"must be the next of them (a prefill chunk), got {feed}")
            reqs.append(req)
            feeds.append(feed)
        return reqs, feeds

    def admit_padded(self, items: Sequence[tuple]) -> None:
        """SPEC §3 / SERVING.md P4: admit several requests and prefill their whole prompts as ONE padded
        batch (attention_mask); each request's state is its row of the batch state, pads dropped."""
        items = [(rid, [int(t) for t in prompt]) for rid, prompt in items]
        rids = [rid for rid, _ in items]
        if not items or len(set(rids)) != len(rids):
            raise ValueError(f"admit_padded: expected distinct request ids, got {rids}")
        for rid, prompt in items:
            if rid in self.requests:
                raise ValueError(f"request {rid!r} already live")
            if not prompt:
                raise ValueError(f"request {rid!r}: empty prompt")
        S = max(len(p) for _, p in items)
        ids, mask = zip(*(self._pad(p, S) for _, p in items))
        logits, batch = self.model.forward(np.asarray(ids, dtype=np.int64), attention_mask=np.asarray(mask))
        for i, (rid, prompt) in enumerate(items):
            real = np.flatnonzero(mask[i])                 # contiguous: the request's own positions
            state = batch.row(i, int(real[0]), int(real[-1]) + 1)
            self.requests[rid] = Request(rid, [], state, prompt, logits[i, int(real[-1])])

    def cancel(self, rid) -> None:
        del self.requests[self._req(rid).rid]

    def logits(self, rid):
        return self._req(rid).logits

    def state(self, rid):
        return self._req(rid).state

    def history(self, rid) -> list:
        return list(self._req(rid).history)

    def live(self) -> list:
        return list(self.requests)
