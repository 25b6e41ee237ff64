"""A minimal serving engine over a Model (oracle.model.Model or impl.model.Model), batch 1 per request.

Each request holds a HybridState, its token history (tokens the state covers) and the logits row of its
last token. Like a CUDA-graph serving engine, a request's KDA buffers (recurrent, conv window) are
persistent slots updated IN PLACE after every forward (DSA caches grow, so they are replaced); snapshots
and forks must therefore deep-copy, or later steps of one branch reach the other.

Scenario operations: admit, prefill_chunk, decode, speculate / accept (rollback is restore + replay),
fork (prefix-cache hit, maybe with a suffix still to prefill), cancel; `step` advances several requests
in ONE packed forward (a flat token stream cut by cu_seqlens: prefill chunks, 1-token decode rows,
zero-length rows, and speculative VERIFY rows: the last sampled token and k draft tokens, whose logits
at every position come back, accept() following), `admit_padded` prefills several new requests as ONE
left-padded batch and splits the batch state per request.

Slots are recycled as vLLM / SGLang state pools recycle them: a cancelled request's KDA buffers go to a
free list, and the next request admitted takes them back UNCLEARED (vLLM does not zero a state page on
reallocation). What keeps a fresh request clean is its first forward, which starts from zeros whatever
its slot holds (`has_initial_state` false: no tokens covered yet) and then writes into the slot.

The small hooks `_restore`, `_fork_state`, `_slot`, `_prefix_state`, `_pad`, `_initial_state` and
`_forward_packed` are what the serving mutants (impl/mutants/serving.py) override, one hook each.
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional, Sequence

import numpy as np

from oracle.types import KDAState

__all__ = ["Engine", "Request", "Speculation"]


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
    spec: Optional["Speculation"] = None   # between speculate() / a verify row of step() and accept()
    slot: Optional[list] = None        # a recycled slot's KDA buffers (per layer, None on DSA layers), held
                                       # until the first forward writes into them; never read as state


class Speculation(NamedTuple):
    """An open speculation: what accept() keeps or rolls back."""

    snapshot: Any                      # deep copy of the state before the draft ran
    logits: Any                        # the logits row before the draft ran
    tokens: list                       # the tokens run: speculate()'s draft, or a verify row's tokens
    verified: Any = None               # a verify row's logits at every position [1 + k, V]; None: speculate()


class Engine:
    """Per-request HybridStates and histories over one model (see module docstring)."""

    def __init__(self, model):
        self.model = model
        self.requests: dict = {}
        self.free_slots: list = []      # freed requests' KDA buffers, reused last-freed first

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

    def _initial_state(self, req: Request, n: int):
        """The state request `req`'s next n tokens run from: its own when it covers tokens, else None
        (zeros: a first chunk has no initial state, whatever its recycled slot holds)."""
        return req.state if req.state.seq_len else None

    def _forward_packed(self, ids, cu, states, drafts: list):
        """ONE packed forward of a step: (logits [T, V], one new state per row). drafts[i]: the draft
        tokens of row i when it is a verify row (0: a prefill chunk or decode row), which a real engine
        routes to its decode path; the product runs every row through the same forward."""
        return self.model.forward_packed(ids, cu, states)

    def _pad(self, prompt: list, S: int) -> tuple[list, list]:
        """(ids row, mask row) of `prompt` in a padded batch of width S: LEFT padding (SPEC §3), so
        the pads precede every real token and leave the request's KDA state untouched."""
        n = len(prompt)
        return [self.model.geometry.pad_id] * (S - n) + list(prompt), [0] * (S - n) + [1] * n

    # ------------------------------------------------------------------ internals

    def _req(self, rid) -> Request:
        try:
            return self.requests[rid]
        except KeyError:
            raise KeyError(f"request {rid!r} is not live") from None

    def _run(self, req: Request, tokens: Sequence[int]):
        """Forward `tokens` from req's initial state; commit the new state in place; return the last logits row."""
        ids = np.asarray([list(tokens)], dtype=np.int64)
        logits, new = self.model.forward(ids, state=self._initial_state(req, len(tokens)))
        self._commit(req, new)
        req.history.extend(int(t) for t in tokens)
        req.logits = logits[0, -1]
        return req.logits

    def _commit(self, req: Request, new) -> None:
        """req.state = new, its KDA arrays written into the request's slot buffers (its state's, or a
        recycled slot's before the first forward) in place."""
        old = req.state.layers if req.state.seq_len or not req.slot else req.slot
        layers = []
        for o, n in zip(old, new.layers):
            if isinstance(o, KDAState) and isinstance(n, KDAState) and tuple(o.recurrent.shape) == \
                    tuple(n.recurrent.shape) and tuple(o.conv.shape) == tuple(n.conv.shape):
                _write(o.recurrent, n.recurrent)          # persistent slot buffers
                _write(o.conv, n.conv)
                layers.append(o)
            else:
                layers.append(n)
        req.state, req.slot = type(new)(new.layer_types, layers, new.seq_len), None

    def _release(self, req: Request) -> None:
        """Put req's KDA buffers on the free list (the slot a later admit takes back, uncleared)."""
        held = req.state.layers if req.state.seq_len else (req.slot or [])
        slot = [e if isinstance(e, KDAState) else None for e in held]
        if any(e is not None for e in slot):
            self.free_slots.append(slot)

    # ------------------------------------------------------------------ API

    def admit(self, rid, prompt: Sequence[int]) -> None:
        if rid in self.requests:
            raise ValueError(f"request {rid!r} already live")
        if len(prompt) == 0:
            raise ValueError("empty prompt")
        slot = self.free_slots.pop() if self.free_slots else None
        self.requests[rid] = Request(rid, [int(t) for t in prompt], self._slot(rid), [], slot=slot)

    def pending(self, rid) -> int:
        """Prompt tokens not yet prefilled."""
        return len(self._req(rid).prompt)

    def prefill_chunk(self, rid, n: int):
        """Feed the next min(n, pending) prompt tokens; returns the last logits row."""
        req = self._req(rid)
        if req.spec is not None:
            raise RuntimeError("prefill during speculation")
        chunk = req.prompt[:n]
        if not chunk:
            return req.logits
        self._run(req, chunk)
        del req.prompt[:len(chunk)]         # after the forward: the hooks see the chunk still pending
        return req.logits

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
        req.spec = Speculation(snap, logits, [int(t) for t in draft_tokens])

    def accept(self, rid, a: int):
        """Close the open speculation keeping a draft tokens; returns the request's logits row.

        After speculate(): the first a of the draft; rollback restores the snapshot and replays them.
        After a verify row of step(): its first token (the last sampled one) and its first a drafts;
        all kept (a = k) keeps the state the verify pass left, else the snapshot is restored and the
        kept tokens replayed; the logits row is the verify pass's at the last kept position (what the
        next token is sampled from), not the replay's.
        """
        req = self._req(rid)
        if req.spec is None:
            raise RuntimeError(f"accept on request {rid!r} without speculation")
        snap, logits, tokens, verified = req.spec
        k = len(tokens) if verified is None else len(tokens) - 1
        if not 0 <= a <= k:
            raise ValueError(f"accept: a={a} not in [0, {k}]")
        req.spec = None
        if verified is None:
            req.state, req.logits = self._restore(snap, req.state), logits
            if a:
                self._run(req, tokens[:a])
            return req.logits
        if a < k:
            req.state = self._restore(snap, req.state)
            self._run(req, tokens[:a + 1])
        else:
            req.history.extend(tokens)
        req.logits = verified[a]
        return req.logits

    def fork(self, src_rid, new_rid, suffix: Sequence[int] = ()) -> None:
        """Prefix-cache hit: new_rid starts from a copy of src's state and history (what src has fed so
        far); `suffix`, the rest of its prompt after the cached prefix, is pending (prefill_chunk / step
        feed it)."""
        src = self._req(src_rid)
        if new_rid in self.requests:
            raise ValueError(f"request {new_rid!r} already live")
        if src.spec is not None:
            raise RuntimeError("fork during speculation")
        self.requests[new_rid] = Request(new_rid, [int(t) for t in suffix],
                                         self._prefix_state(self._fork_state(src.state)),
                                         list(src.history), src.logits)

    def step(self, rows: Sequence[tuple]) -> list:
        """SERVING.md P4: advance several requests in ONE packed forward.

        rows: (rid, tokens) pairs, tokens may be empty (scheduled, nothing to feed). A request with a
        pending prompt must be given its next prompt tokens (a prefill chunk); otherwise the tokens are
        decode / continuation tokens. A row (rid, tokens, True) is a speculative VERIFY row (SERVING.md
        B3.7): tokens are the request's last sampled token followed by k >= 1 draft tokens; its state
        is snapshotted, nothing of it is committed to the history, and accept(rid, a) must follow.
        Every row is checked before anything runs, so a bad row (rid not live, named twice, open
        speculation) leaves every request as it was. Returns each row's last logits row (unchanged for
        an empty row); for a verify row, the logits at every position [1 + k, V].
        """
        reqs, feeds, verify = self._step_rows(rows)
        if not any(feeds):
            return [r.logits for r in reqs]
        cu = np.cumsum([0] + [len(f) for f in feeds])
        ids = np.asarray([t for f in feeds for t in f], dtype=np.int64)
        states = [self._initial_state(r, len(f)) for r, f in zip(reqs, feeds)]
        logits, new = self._forward_packed(ids, cu, states, [len(f) - 1 if v else 0 for f, v in zip(feeds, verify)])
        out = []
        for i, (req, feed) in enumerate(zip(reqs, feeds)):
            if verify[i]:
                rows_i = logits[int(cu[i]):int(cu[i + 1])]
                req.spec = Speculation(req.state.snapshot(), req.logits, feed, rows_i)
                out.append(rows_i)
            # zero-length rows commit too: their state came back through the kernels and must be unchanged
            self._commit(req, new[i])
            if feed and not verify[i]:
                del req.prompt[:len(feed)]
                req.history.extend(feed)
                req.logits = logits[int(cu[i + 1]) - 1]
            if not verify[i]:
                out.append(req.logits)
        return out

    def _step_rows(self, rows) -> tuple[list, list, list]:
        """The live Request, the token list and the verify flag of every row; raises on a bad row before
        any change."""
        reqs, feeds, verify, seen = [], [], [], set()
        for j, row in enumerate(rows):
            try:
                rid, tokens, *flag = row
                if len(flag) > 1:
                    raise ValueError
            except (TypeError, ValueError):
                raise ValueError(f"step: row {j} is {row!r}, expected a (rid, tokens) pair or a "
                                 f"(rid, tokens, verify) triple") from None
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
            if flag and flag[0] and (req.prompt or len(feed) < 2):
                raise ValueError(f"step: verify row of request {rid!r} needs a finished prompt and the last "
                                 f"sampled token plus at least one draft token, got {feed} with "
                                 f"{len(req.prompt)} prompt tokens pending")
            reqs.append(req)
            feeds.append(feed)
            verify.append(bool(flag and flag[0]))
        return reqs, feeds, verify

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
        """Drop the request; its slot goes on the free list (uncleared: see the module docstring)."""
        req = self._req(rid)
        self._release(req)
        del self.requests[req.rid]

    def logits(self, rid):
        return self._req(rid).logits

    def state(self, rid):
        return self._req(rid).state

    def history(self, rid) -> list:
        return list(self._req(rid).history)

    def live(self) -> list:
        return list(self.requests)
