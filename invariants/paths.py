"""The prefix/chunk/continuation invariant for the KDA sublayer (ARCHITECTURE.md).

One token stream, several execution paths; each path's output AND state (recurrent + conv window) is
held to the oracle's ONE-PREFILL result (kernel_replacement, the baseline running the same path), and
to the candidate's own one-prefill result (self_consistency).

Paths: chunked_prefill (calls cut at drawn splits), token_decode (prefill of the first part, then one
token per call: the fused decode kernel), continuation (prefill, snapshot -> serialize -> restore
into fresh tensors -> continue in one call), packed (documents in one cu_seqlens call vs each alone,
a NaN poisoned into one document's state must stay in that document).
"""
from __future__ import annotations

import numpy as np
import torch
from invariants.labels import label as event
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from invariants.kda_checks import Comparison, call_sublayer, held_sublayer, sublayer_inputs
from invariants.target import Target
from oracle import kda as okda
from oracle.types import KDAState
from strategies import cases as sc
from strategies import tensors as tz
from strategies.sequences import cu_seqlens


def serialize(state: KDAState) -> bytes:
    """A KDA state as safetensors bytes (what a prefix cache would persist): f32 recurrent kept f32."""
    return st_save({"recurrent": state.recurrent.contiguous().cpu(), "conv": state.conv.contiguous().cpu()})


def restore(blob: bytes, device) -> KDAState:
    d = st_load(blob)
    return KDAState(d["recurrent"].to(device), d["conv"].to(device))


def _cat(ys):
    return torch.cat(ys, dim=1) if isinstance(ys[0], torch.Tensor) else np.concatenate(ys, axis=1)


def chunked_prefill(t, w, x, mask, state, splits):
    ys, a = [], 0
    for n in splits:
        y, state = call_sublayer(t, w, x[:, a:a + n], state, mask[:, a:a + n])
        ys.append(y)
        a += n
    return _cat(ys), state


def token_decode(t, w, x, mask, state, splits):
    first = splits[0]
    y, state = call_sublayer(t, w, x[:, :first], state, mask[:, :first])
    ys = [y]
    for i in range(first, x.shape[1]):
        y, state = call_sublayer(t, w, x[:, i:i + 1], state, mask[:, i:i + 1])
        ys.append(y)
    return _cat(ys), state


def continuation(t, w, x, mask, state, splits):
    first = splits[0]
    y, state = call_sublayer(t, w, x[:, :first], state, mask[:, :first])
    if first == x.shape[1]:
        return y, state
    if t is not None:
        blob = serialize(state)
        state = None
        state = restore(blob, t.device)
    y2, state = call_sublayer(t, w, x[:, first:], state, mask[:, first:])
    return _cat([y, y2]), state


PATHS = {"chunked_prefill": chunked_prefill, "token_decode": token_decode, "continuation": continuation}


def run_paths(case: sc.SublayerCase, cand: Target, base: Target):
    if len(case.splits) > 1:
        event("prefill cut into calls")
    if any(n % 64 for n in case.splits[:-1]):
        event("split not on a chunk boundary")
    w, x, mask, state = sublayer_inputs(case)
    y_ref, s_ref = okda.sublayer(w, x, state, mask)
    y_held, s_held = held_sublayer(cand, w, x, state, mask)
    y_one, s_one = call_sublayer(cand, w, x, state, mask)
    res = []
    for path, fn in PATHS.items():
        yc, scand = fn(cand, w, x, mask, state, case.splits)
        yb, sb = fn(base, w, x, mask, state, case.splits)
        res += [Comparison(path, "output", yc, y_ref, yb, held_reference=y_held),
                Comparison(path, "final_state", scand.recurrent, s_ref.recurrent, sb.recurrent,
                           held_reference=s_held.recurrent),
                Comparison(path, "conv_state", scand.conv, s_ref.conv, sb.conv, held_reference=s_held.conv),
                Comparison(path, "output_vs_prefill", yc, y_one, kind="self_consistency"),
                Comparison(path, "state_vs_prefill", scand.recurrent, s_one.recurrent,
                           kind="self_consistency")]
    return res


def packed_inputs(case: sc.PackedCase):
    g = case.geometry
    rng = np.random.default_rng(case.seed)
    w = tz.kda_weights(rng, g.heads, g.head_dim, g.hidden, g.conv_width, case.family, g.lower_bound)
    T = sum(case.docs)
    x = tz.hidden_states(rng, 1, T, g.hidden, case.family)
    state = tz.kda_state(rng, len(case.docs), g.heads, g.head_dim, g.conv_width)
    if case.poison is not None:
        state.recurrent[case.poison, 0, 0, 0] = np.nan
    return w, x, state


def _alone(w, x, state, docs):
    """The oracle on every document alone, packed back into the cu_seqlens layout."""
    ys, rec, conv, a = [], [], [], 0
    for i, n in enumerate(docs):
        s = KDAState(state.recurrent[i:i + 1], state.conv[i:i + 1])
        if n:
            y, s = okda.sublayer(w, x[:, a:a + n], s)
            ys.append(y)
        rec.append(s.recurrent)
        conv.append(s.conv)
        a += n
    return np.concatenate(ys, axis=1), KDAState(np.concatenate(rec), np.concatenate(conv))


def run_packed(case: sc.PackedCase, cand: Target, base: Target):
    if case.poison is not None:
        event("NaN poisoned into one document")
    if any(n == 1 for n in case.docs):
        event("1-token document")
    if any(n == 0 for n in case.docs):
        event("zero-length document")
    w, x, state = packed_inputs(case)
    cu = cu_seqlens(case.docs)
    y_ref, s_ref = _alone(w, x, state, case.docs)
    y_held, s_held = _alone(cand.held_weights(w), cand.held(x), cand.held_state(state), case.docs)
    yc, scand = call_sublayer(cand, w, x, state, None, cu)
    yb, sb = call_sublayer(base, w, x, state, None, cu)
    return [Comparison("packed", "output", yc, y_ref, yb, held_reference=y_held),
            Comparison("packed", "final_state", scand.recurrent, s_ref.recurrent, sb.recurrent,
                       held_reference=s_held.recurrent),
            Comparison("packed", "conv_state", scand.conv, s_ref.conv, sb.conv, held_reference=s_held.conv)]
