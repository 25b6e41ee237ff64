"""The prefix/chunk/continuation invariant of the WHOLE decoder (ARCHITECTURE.md; SPEC §3, §10).

One prompt batch (tiny random model, drawn seed; drawn length, chunk splits, left padding) runs
through several paths on the candidate, the torch baseline and the float64 oracle:

    chunked_prefill   calls cut at the drawn splits, each given the 2-D mask up to its end
    token_decode      prefill of the first S - k tokens, then k one-token calls (mask remembered by
                      the DSA valid flags, SPEC §10)
    continuation      the same prefix state -> serialize -> deserialize -> the k tokens in one call
    padded_row        a left-padded row of the chunked path vs the same tokens alone, unpadded

Every path's logits (real positions) AND every piece of state (KDA recurrent + conv window per layer,
DSA latent rows, indexer rows, valid flags, seq_len) are held to the oracle's ONE whole prefill
(kernel_replacement; exact for flags and seq_len). The oracle's own paths must agree with its whole
prefill to float64 rounding (paths "oracle_*", self_consistency).

Models are cached per (geometry, seed) in the process: a checkpoint is written and read once.
"""
from __future__ import annotations

import functools
import json
import tempfile
import types
from typing import NamedTuple

import numpy as np
import torch
from hypothesis import strategies as st

from invariants.compare import to_numpy
from invariants.kda_checks import Comparison
from invariants.labels import label as event
from invariants.target import Target, poisoned_memory
from oracle import checkpoint as ock
from oracle import model as om
from oracle.config import PRESETS, Geometry
from oracle.state import HybridState as OracleState
from oracle.types import DSACache, KDAState
from strategies import cases as sc
from strategies.sequences import chunk_splits

PATHS = ("chunked_prefill", "token_decode", "continuation")
MAX_DECODE_STEPS = 3


class ModelCase(NamedTuple):
    """A prompt batch through the whole decoder: the first `layers` layers of geometry `base` (a preset
    name or a config JSON), random weights from `model_seed`, ids from `seed`."""

    base: str
    layers: int
    model_seed: int
    batch: int
    length: int
    left_pad: tuple[int, ...]
    splits: tuple[int, ...]
    decode_steps: int
    seed: int


# `glmgate repro` rebuilds cases by type name (strategies/cases.py)
sc.CASE_TYPES.setdefault("ModelCase", ModelCase)


# ----------------------------------------------------------------------------- geometry and models


def model_cut(base: Geometry) -> int:
    """SPEC §13: the fewest leading layers holding every attention kind, MLP kind and indexer kind
    of `base` (the shared layer's hand-off included): CI time grows with layers."""
    want = (set(base.layer_types), set(base.mlp_layer_types), set(base.indexer_types))
    for n in range(1, base.num_hidden_layers + 1):
        have = (set(base.layer_types[:n]), set(base.mlp_layer_types[:n]), set(base.indexer_types[:n]))
        if have == want:
            return n
    return base.num_hidden_layers


def base_name(base: Geometry) -> str:
    """The preset's name when `base` is one, else its config as JSON (a case must rebuild alone)."""
    for name, g in PRESETS.items():
        if g == base:
            return name
    return json.dumps(base.to_dict(), separators=(",", ":"))


@functools.lru_cache(maxsize=4)
def geometry_of(base: str, layers: int) -> Geometry:
    """The case's geometry: `base` cut to its first `layers` layers (SPEC §1 schedules cut alike)."""
    g = Geometry.preset(base) if base in PRESETS else Geometry.from_dict(json.loads(base))
    return g.replace(num_hidden_layers=layers, layer_types=g.layer_types[:layers],
                     mlp_layer_types=g.mlp_layer_types[:layers], indexer_types=g.indexer_types[:layers])


@functools.lru_cache(maxsize=6)
def oracle_weights(base: str, layers: int, seed: int):
    """float64 Weights of a random checkpoint (oracle.checkpoint.write_random), built once per process."""
    with tempfile.TemporaryDirectory(prefix="glmgate-model-") as d:
        return ock.load(ock.write_random(d, geometry_of(base, layers), seed))


@functools.lru_cache(maxsize=12)
def target_weights(base: str, layers: int, seed: int, device: str, dtype: torch.dtype):
    """The same weights as torch tensors in a target's device and working dtype (impl.model.to_torch)."""
    from impl.model import to_torch
    return to_torch(oracle_weights(base, layers, seed), device, dtype)


# ----------------------------------------------------------------------------- strategy


def model_lengths(g: Geometry, max_len: int) -> st.SearchStrategy[int]:
    """Pool-boundary lengths (1..2·kpool+1, topk + kpool ± 1: real sparsity) or any up to max_len."""
    special = sorted({n for n in [*range(1, 2 * g.index_kpool + 2), g.index_topk + g.index_kpool - 1,
                                  g.index_topk + g.index_kpool, g.index_topk + g.index_kpool + 1]
                      if 1 <= n <= max_len})
    return st.booleans().flatmap(lambda pick: st.sampled_from(special) if pick else st.integers(1, max_len))


@st.composite
def model_cases(draw, base: Geometry, *, max_len: int = 13, seeds: int = 3) -> ModelCase:
    """SPEC §3/§10: a tiny model seed (one of `seeds`, cached), length, splits, left pads, decode steps.

    max_len 13 > topk + kpool = 12 keeps real top-k sparsity reachable; the Triton interpreter runs
    ~0.3-1 s per token through 5 layers, so longer prompts belong to the GPU profile.
    """
    name, layers = base_name(base), model_cut(base)
    g = geometry_of(name, layers)
    length = draw(model_lengths(g, max_len))
    batch = draw(st.integers(1, 2))
    pad = tuple(draw(st.integers(0, min(length - 1, 6))) for _ in range(batch))
    splits = legal_splits(draw(chunk_splits(length, max_parts=3)), max(pad))
    return ModelCase(name, layers, draw(st.integers(0, seeds - 1)), batch, length, pad, splits,
                     draw(st.integers(0, MAX_DECODE_STEPS)), draw(sc.SEEDS))


def legal_splits(splits, max_pad: int) -> tuple[int, ...]:
    """SPEC §3: a one-token call is never padding (its mask is replaced by ones), so a 1-token part
    that still covers left padding is no legal cut: merge it into the next part (or the previous)."""
    parts, a = [], 0
    for n in splits:
        if parts and parts[-1] == 1 and a - 1 < max_pad:
            parts[-1] += n
        else:
            parts.append(n)
        a += n
    if len(parts) > 1 and parts[-1] == 1 and a - 1 < max_pad:
        parts[-2:] = [parts[-2] + 1]
    return tuple(parts)


def prompt(case: ModelCase, g: Geometry):
    """ids [B, S] (pads = pad_token_id) and the 2-D mask [B, S] (1 = real) of a case."""
    rng = np.random.default_rng(case.seed)
    ids = rng.integers(1, g.vocab_size, (case.batch, case.length))
    mask = np.ones((case.batch, case.length), dtype=np.int64)
    for r, p in enumerate(case.left_pad):
        ids[r, :p] = g.pad_token_id
        mask[r, :p] = 0
    return ids, mask


def decode_steps(case: ModelCase) -> int:
    """k one-token calls at the end, over real tokens only (a 1-token call is never padding, SPEC §3)."""
    return max(0, min(case.decode_steps, case.length - 1 - max(case.left_pad)))


# ----------------------------------------------------------------------------- sides


# impl.model's forward and impl.state's deserialize: what a candidate runs unless its registry entry
# brings its own `model` namespace (the model mutants of impl/mutants.py do)
def _default_model_ops():
    from impl import model as im
    from impl.state import HybridState
    return types.SimpleNamespace(forward=im.forward, deserialize=HybridState.deserialize)


class Side(NamedTuple):
    """One implementation of the decoder as three calls: forward(ids, mask, state), bytes, restore."""

    forward: object
    serialize: object
    deserialize: object


def oracle_side(weights) -> Side:
    return Side(lambda ids, mask, state: om.forward(weights, ids, state, mask),
                lambda s: s.serialize(), OracleState.deserialize)


def target_side(t: Target, case: ModelCase) -> Side:
    """The candidate's (or baseline's) mechanism namespaces composed by its model namespace."""
    from impl.model import Backend
    ops = getattr(t.impl, "model", None) or _default_model_ops()
    wt = target_weights(case.base, case.layers, case.model_seed, t.device, t.dtype)
    be = Backend(t.impl.name, t.impl.kda, t.impl.mla, t.impl.moe, t.impl.mhc)

    def forward(ids, mask, state):
        with poisoned_memory():
            return ops.forward(wt, torch.as_tensor(ids, device=t.device), state,
                               torch.as_tensor(mask, device=t.device), be)

    return Side(forward, lambda s: s.serialize(), lambda b: ops.deserialize(b, device=t.device))


# ----------------------------------------------------------------------------- paths


def _cat(xs):
    return np.concatenate([to_numpy(x) for x in xs], axis=1)


def chunked_prefill(side: Side, ids, mask, splits):
    """Calls cut at `splits`, each with the mask up to its last token (SPEC §3: its last S columns)."""
    logits, state, a = [], None, 0
    for n in splits:
        lg, state = side.forward(ids[:, a:a + n], mask[:, :a + n], state)
        logits.append(lg)
        a += n
    return _cat(logits), state


def prefix_paths(side: Side, ids, mask, k: int) -> dict:
    """token_decode and continuation from one shared prefix of S - k tokens (k = 0: one prefill)."""
    S = ids.shape[1]
    if k == 0:
        lg, state = side.forward(ids, mask, None)
        return {"token_decode": (to_numpy(lg), state), "continuation": (to_numpy(lg), state)}
    P = S - k
    lp, sp = side.forward(ids[:, :P], mask[:, :P], None)
    blob = side.serialize(sp)                      # before any later call could touch the buffers
    logits, state = [lp], sp
    for t in range(P, S):
        lg, state = side.forward(ids[:, t:t + 1], mask[:, :t + 1], state)
        logits.append(lg)
    lc, sc_ = side.forward(ids[:, P:], mask, side.deserialize(blob))
    return {"token_decode": (_cat(logits), state), "continuation": (_cat([lp, lc]), sc_)}


def run_paths(side: Side, ids, mask, case: ModelCase) -> dict:
    out = {"chunked_prefill": chunked_prefill(side, ids, mask, case.splits)}
    out.update(prefix_paths(side, ids, mask, decode_steps(case)))
    return out


# ----------------------------------------------------------------------------- state as arrays


def state_arrays(state, row=None, pad: int = 0) -> dict:
    """Every cached quantity of a HybridState as float64, stacked over layers (the worst element's
    first index is the layer's ordinal among its kind); `row`, `pad`: one batch row, real tokens only."""
    pick = (lambda a: a) if row is None else (lambda a: a[row:row + 1])
    tok = (lambda a: a) if row is None else (lambda a: a[row:row + 1, pad:])
    kda = [e for e in state.layers if isinstance(e, KDAState)]
    dsa = [e for e in state.layers if isinstance(e, DSACache)]
    rows = [to_numpy(tok(e.index_rows)) for e in dsa if e.index_rows is not None]
    out = {"kda_recurrent": [to_numpy(pick(e.recurrent)) for e in kda],
           "kda_conv": [to_numpy(pick(e.conv)) for e in kda],
           "dsa_latent": [to_numpy(tok(e.latent)) for e in dsa],
           "index_rows": [r[..., :-1] for r in rows],
           "valid_flags": [r[..., -1] for r in rows]}
    out = {q: np.stack(v) for q, v in out.items() if v}
    if row is None:
        out["seq_len"] = np.array([state.seq_len], dtype=np.float64)
    return out


EXACT = ("valid_flags", "seq_len")


def _state_comparisons(path: str, ac: dict, ar: dict, ab, kind: str) -> list:
    """One comparison per state quantity of the reference (exact for flags and seq_len)."""
    res = []
    for q, r in ar.items():
        k = "exact" if q in EXACT else kind
        res.append(Comparison(path, q, ac.get(q), r, None if ab is None or k == "exact" else ab.get(q), kind=k))
    return res


def compare(path: str, cand, ref, real, base=None, kind: str = "kernel_replacement") -> list:
    """Comparisons of one path: logits at the real positions, then every state quantity."""
    (lc, scand), (lr, sref) = cand, ref
    lb = None if base is None else to_numpy(base[0])[real]
    res = [Comparison(path, "logits", to_numpy(lc)[real], to_numpy(lr)[real], lb, kind=kind)]
    ab = None if base is None else state_arrays(base[1])
    return res + _state_comparisons(path, state_arrays(scand), state_arrays(sref), ab, kind)


def padded_rows(case: ModelCase):
    return [(r, p) for r, p in enumerate(case.left_pad) if p > 0]


def compare_padded(path: str, cand, alone: dict, base=None, kind: str = "kernel_replacement") -> list:
    """Each left-padded row (its real tokens: logits and state) vs the same tokens alone, unpadded."""
    res = []
    for (r, p), (la, sa) in alone.items():
        lb = None if base is None else to_numpy(base[0])[r:r + 1, p:]
        res.append(Comparison(path, "logits", to_numpy(cand[0])[r:r + 1, p:], to_numpy(la), lb, kind=kind))
        ar = state_arrays(sa)
        ar.pop("seq_len")                                  # the padded row's cache also holds its pads
        ab = None if base is None else state_arrays(base[1], r, p)
        res += _state_comparisons(path, state_arrays(cand[1], r, p), ar, ab, kind)
    return res


# ----------------------------------------------------------------------------- the check


def _label(case: ModelCase, k: int) -> None:
    if len(case.splits) > 1:
        event("prefill cut into calls")
    if k:
        event("one-token decode steps")
    if any(case.left_pad):
        event("left padding")
    if len(case.splits) > 1 and max(case.left_pad) >= case.splits[0]:
        event("padding spans calls")
    g = geometry_of(case.base, case.layers)
    if case.length >= g.index_topk + g.index_kpool:
        event("real top-k sparsity")


def run_model_paths(case: ModelCase, cand: Target, base: Target) -> list:
    """SPEC §3, §10: every path on candidate, baseline and oracle vs the oracle's one prefill."""
    g = geometry_of(case.base, case.layers)
    k = decode_steps(case)
    _label(case, k)
    ids, mask = prompt(case, g)
    real = mask.astype(bool)
    oracle = oracle_side(oracle_weights(case.base, case.layers, case.model_seed))
    whole = oracle.forward(ids, mask, None)
    alone = {(r, p): oracle.forward(ids[r:r + 1, p:], mask[r:r + 1, p:], None) for r, p in padded_rows(case)}
    runs = {n: run_paths(s, ids, mask, case) for n, s in
            (("cand", target_side(cand, case)), ("base", target_side(base, case)), ("oracle", oracle))}
    res = []
    for path in PATHS:
        res += compare(path, runs["cand"][path], whole, real, runs["base"][path])
        res += compare(f"oracle_{path}", runs["oracle"][path], whole, real, kind="self_consistency")
    res += compare_padded("padded_row", runs["cand"]["chunked_prefill"], alone, runs["base"]["chunked_prefill"])
    res += compare_padded("oracle_padded_row", whole, alone, kind="self_consistency")
    return res
