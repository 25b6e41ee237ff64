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
from typing import NamedTuple, Optional

import numpy as np
import torch
from hypothesis import strategies as st

from invariants.compare import RoutingReference, to_int, to_numpy
from invariants.check import Check
from invariants.compare import Comparison
from invariants.dsa_checks import token_pool
from invariants.mla_checks import attendable
from invariants.labels import label as event
from invariants.target import Target
from oracle import checkpoint as ock
from oracle import model as om
from oracle.config import DENSE, LINEAR, PRESETS, SHARED, Geometry
from oracle.state import HybridState as OracleState
from oracle.types import DSACache, KDAState, LayerDecisions
from strategies.sequences import chunk_splits, left_pads
from strategies.tensors import SEEDS
from invariants.model_handoff import PERSISTED, handoff_comparisons, persisted_continuation

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


def named_geometry(base: str) -> Geometry:
    """The inverse of base_name: the preset of that name, else the geometry of that config JSON."""
    return Geometry.preset(base) if base in PRESETS else Geometry.from_dict(json.loads(base))


@functools.lru_cache(maxsize=4)
def geometry_of(base: str, layers: int) -> Geometry:
    """The case's geometry: `base` cut to its first `layers` layers (SPEC §1 schedules cut alike)."""
    g = named_geometry(base)
    return g.replace(num_hidden_layers=layers, layer_types=g.layer_types[:layers],
                     mlp_layer_types=g.mlp_layer_types[:layers], indexer_types=g.indexer_types[:layers])


# bytes a parameter takes while a whole-decoder check builds its model: the float64 oracle copy, the
# checkpoint written and read back, a target's copy (an estimate: the run's high-water mark is about this)
BYTES_PER_PARAM = 16


def available_memory() -> Optional[int]:
    """Bytes the kernel says a new allocation can take now (Linux /proc/meminfo MemAvailable), or None."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def require_memory(g: Geometry, what: str) -> None:
    """Refuse, with the numbers, a geometry whose random float64 checkpoint cannot fit in this machine's
    memory (the released geometry cut to its first four layers holds 9.5 G parameters: ~140 GiB), before
    anything is allocated: an out-of-memory kill reports nothing."""
    from math import prod
    from oracle.checkpoint_names import expected_shapes
    params = sum(prod(shape) for shape in expected_shapes(g, on_disk=False).values())
    need, have = params * BYTES_PER_PARAM, available_memory()
    if have is not None and need > have:
        raise MemoryError(
            f"{what}: the random checkpoint of this geometry cut to {g.num_hidden_layers} layers holds "
            f"{params / 1e9:.2f} G parameters, about {need / 2 ** 30:.0f} GiB while a check builds it in float64; "
            f"this machine has {have / 2 ** 30:.0f} GiB available. Run the whole-decoder and serving checks on a "
            f"smaller config (glmgate checkpoint make-tiny DIR, then edit its dimensions) or on a machine "
            f"with more memory; the per-mechanism checks (--mechanism kda, dsa, mla, moe, mhc, nvfp4) draw "
            f"their own sizes")


@functools.lru_cache(maxsize=6)
def oracle_weights(base: str, layers: int, seed: int):
    """float64 Weights of a random checkpoint (oracle.checkpoint.write_random), built once per process."""
    require_memory(geometry_of(base, layers), "the whole-decoder checks")
    with tempfile.TemporaryDirectory(prefix="glmgate-model-") as d:
        return ock.load(ock.write_random(d, geometry_of(base, layers), seed))


@functools.lru_cache(maxsize=12)
def target_weights(base: str, layers: int, seed: int, device: str, dtype: torch.dtype):
    """The same weights as torch tensors in a target's device and working dtype (impl.model.to_torch)."""
    from impl.model import to_torch
    return to_torch(oracle_weights(base, layers, seed), device, dtype)


# ----------------------------------------------------------------------------- strategy


def model_lengths(g: Geometry, max_len: int) -> st.SearchStrategy[int]:
    """Pool-boundary lengths (1..2·kpool+1, topk + kpool ± 1), lengths past topk + kpool (real top-k
    sparsity: the selection no longer covers the whole prefix), or any up to max_len; a third each
    (half special, half any for short prompts, whose special lengths reach past topk + kpool)."""
    special = sorted({n for n in [*range(1, 2 * g.index_kpool + 2), g.index_topk + g.index_kpool - 1,
                                  g.index_topk + g.index_kpool, g.index_topk + g.index_kpool + 1]
                      if 1 <= n <= max_len})
    lo = g.index_topk + g.index_kpool
    if max_len <= lo + 2:
        # the interpreter's short prompts: the special lengths already hold every sparse one
        return st.booleans().flatmap(lambda pick: st.sampled_from(special) if pick else st.integers(1, max_len))
    sparse = st.integers(lo, max_len)
    return st.integers(0, 2).flatmap(lambda pick: (st.sampled_from(special), sparse, st.integers(1, max_len))[pick])


# prompt lengths: the Triton interpreter runs ~0.3-1 s per token through 5 layers, so the CPU stops
# at 13 (> topk + kpool = 12: real top-k sparsity stays reachable); compiled kernels take 40, deep
# into sparsity (many pools to choose among) at a fraction of a second per example
MAX_LEN = {"interpreter": 13, "compiled": 40}


@st.composite
def model_cases(draw, base: Geometry, *, max_len: Optional[int] = None, seeds: int = 3) -> ModelCase:
    """SPEC §3/§10: a tiny model seed (one of `seeds`, cached), length, splits, left pads, decode steps;
    max_len None: MAX_LEN for where the kernels run (the interpreter, or compiled on a GPU)."""
    from impl import interpreted
    if max_len is None:
        max_len = MAX_LEN["interpreter" if interpreted() else "compiled"]
    name, layers = base_name(base), model_cut(base)
    g = geometry_of(name, layers)
    # the draws that set an example's cost first (the shrinker simplifies in draw order), the pads last
    length, batch = draw(model_lengths(g, max_len)), draw(st.integers(1, 2))
    splits, model_seed = draw(chunk_splits(length, max_parts=3)), draw(st.integers(0, seeds - 1))
    steps, seed = draw(st.integers(0, MAX_DECODE_STEPS)), draw(SEEDS)
    pad = draw(left_pads(batch, length, max_pad=6))
    return ModelCase(name, layers, model_seed, batch, length, pad, legal_splits(splits, max(pad)), steps, seed)


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
    """ids [B, S] (pads = the geometry's pad id) and the 2-D mask [B, S] (1 = real) of a case."""
    rng = np.random.default_rng(case.seed)
    ids = rng.integers(1, g.vocab_size, (case.batch, case.length))
    mask = np.ones((case.batch, case.length), dtype=np.int64)
    for r, p in enumerate(case.left_pad):
        ids[r, :p] = g.pad_id
        mask[r, :p] = 0
    return ids, mask


def decode_steps(case: ModelCase) -> int:
    """k one-token calls at the end, over real tokens only (a 1-token call is never padding, SPEC §3)."""
    return max(0, min(case.decode_steps, case.length - 1 - max(case.left_pad)))


# ----------------------------------------------------------------------------- sides


# impl.model's forward and deserialize: what a candidate runs unless it brings its own `model`
# namespace (a model port; the model mutants of impl/mutants/model.py do too)
def _default_model_ops():
    from impl import model as im
    return im


class Side(NamedTuple):
    """One implementation of the decoder as three calls: forward(ids, mask, state), bytes, restore;
    `log` receives, per forward call, the discrete decisions it took (one record per decision-making
    sublayer, in layer order; the oracle's own side logs nothing)."""

    forward: object
    serialize: object
    deserialize: object
    log: list


def oracle_side(weights) -> Side:
    return Side(lambda ids, mask, state: om.forward(weights, ids, state, mask),
                lambda s, kda_dtype=None: s.serialize(kda_dtype), OracleState.deserialize, [])


class _Passthrough:
    """A mechanism namespace with some calls wrapped; everything else is the namespace's own."""

    def __init__(self, ns, log: list):
        self._ns, self._log = ns, log

    def __getattr__(self, name):
        return getattr(self._ns, name)


class _RecordSelections(_Passthrough):
    """Logs the selection indices [B, S, W] a full DSA layer attended (what the next layer was handed)."""

    def sublayer(self, w, iw, a, cache=None, mask=None, prev=None, kind="full"):
        out = self._ns.sublayer(w, iw, a, cache, mask, prev, kind)
        if kind != SHARED:
            self.record_selection(out[2].indices)
        return out

    def record_selection(self, indices) -> None:
        """For a model port that runs its own attention instead of this namespace's sublayer: report the
        selection [B, S, W] each full DSA layer attended, in layer order (docs/candidates.md §12)."""
        self._log.append(("selection", to_int(indices)))


class _RecordRouting(_Passthrough):
    """Logs an MoE layer's expert ids [N, k] by asking the namespace's own `route` on the same input
    (deterministic: the same choice its `forward` makes), then runs its `forward` unchanged."""

    def __init__(self, ns, log: list):
        super().__init__(ns, log)
        inner = ns.forward

        # the wrapped forward's own signature (functools.wraps): the decoder asks it whether it takes the
        # NVFP4 codes (impl.model._takes), and a **kw here would say yes for the torch baseline's too
        @functools.wraps(inner)
        def forward(w, x, *args, **kw):
            self.record_experts(self._ns.route(w, x).expert_ids)
            return inner(w, x, *args, **kw)
        self.forward = forward

    def record_experts(self, expert_ids) -> None:
        """For a model port that runs its own MoE layers: report each one's expert ids [N, k], in layer
        order (docs/candidates.md §12)."""
        self._log.append(("experts", to_int(expert_ids)))


def target_side(t: Target, case: ModelCase) -> Side:
    """The candidate's (or baseline's) mechanism namespaces composed by its model namespace."""
    ops = getattr(t.impl, "model", None) or _default_model_ops()
    wt = target_weights(case.base, case.layers, case.model_seed, t.device, t.dtype)
    log, calls = [], []
    be = t.impl._replace(mla=_RecordSelections(t.impl.mla, log), moe=_RecordRouting(t.impl.moe, log))

    def forward(ids, mask, state):
        log.clear()
        with t.poisoned():
            out = ops.forward(wt, torch.as_tensor(ids, device=t.device), state,
                              torch.as_tensor(mask, device=t.device), be)
        calls.append(list(log))
        return out

    return Side(forward, lambda s, kda_dtype=None: s.serialize(kda_dtype), lambda b: ops.deserialize(b, device=t.device),
                calls)


# ----------------------------------------------------------------------------- paths


def _cat(xs):
    return np.concatenate([to_numpy(x) for x in xs], axis=1)


class PathRun(NamedTuple):
    """One path's result: logits [B, S, V], the final state, and the decisions of its calls in token
    order (one log per forward call, see Side; empty on the oracle)."""

    logits: object
    state: object
    calls: list
    handoff: Optional[tuple] = None   # a restored path: (state arrays at the snapshot, the same restored)


def chunked_prefill(side: Side, ids, mask, splits) -> PathRun:
    """Calls cut at `splits`, each with the mask up to its last token (SPEC §3: its last S columns)."""
    logits, state, a, first = [], None, 0, len(side.log)
    for n in splits:
        lg, state = side.forward(ids[:, a:a + n], mask[:, :a + n], state)
        logits.append(lg)
        a += n
    return PathRun(_cat(logits), state, side.log[first:])


def prefix_paths(side: Side, ids, mask, k: int, persisted: tuple = ()) -> dict:
    """token_decode and continuation from one shared prefix of S - k tokens (k = 0: one prefill); for
    each KDA dtype of `persisted` ("bfloat16") also the continuation from a snapshot persisted in it
    (invariants/model_handoff.py)."""
    S = ids.shape[1]
    first = len(side.log)
    if k == 0:
        lg, state = side.forward(ids, mask, None)
        run = PathRun(to_numpy(lg), state, side.log[first:])
        return {"token_decode": run, "continuation": run}
    P = S - k
    lp, sp = side.forward(ids[:, :P], mask[:, :P], None)
    blob = side.serialize(sp)                      # before any later call could touch the buffers
    blobs, held = {d: side.serialize(sp, d) for d in persisted}, state_arrays(sp)
    logits, state = [lp], sp
    for t in range(P, S):
        lg, state = side.forward(ids[:, t:t + 1], mask[:, :t + 1], state)
        logits.append(lg)
    decode = side.log[first:]
    restored = side.deserialize(blob)
    lc, sc_ = side.forward(ids[:, P:], mask, restored)
    # the prefix call, then the continuation call (the oracle's side logs nothing)
    cont = decode[:1] + side.log[first + len(decode):]
    out = {"token_decode": PathRun(_cat(logits), state, decode),
           "continuation": PathRun(_cat([lp, lc]), sc_, cont, (held, state_arrays(restored)))}
    return out | {f"continuation_{d}": persisted_continuation(side, blobs[d], held, ids, mask, P, (lp, decode[:1]))
                  for d in persisted}


def run_paths(side: Side, ids, mask, case: ModelCase, persisted: tuple = ()) -> dict:
    out = {"chunked_prefill": chunked_prefill(side, ids, mask, case.splits)}
    out.update(prefix_paths(side, ids, mask, decode_steps(case), persisted))
    return out


# ----------------------------------------------------------------------------- decisions


def path_decisions(g: Geometry, calls: list, B: int) -> list:
    """One LayerDecisions per layer for a whole path: each call's logged decisions mapped to the
    layers that take them (full DSA: selection; MoE: experts), concatenated along the tokens in call
    order (selections [B, S, W]; expert ids [B·S, k] in (b, s) order, the oracle's token order)."""
    per_layer = [[] for _ in range(g.num_hidden_layers)]
    for log in calls:
        it = iter(log)
        for i in range(g.num_hidden_layers):
            if g.layer_types[i] != LINEAR and g.indexer_types[i] != SHARED:
                per_layer[i].append(("selection", _next_decision(it, i)))
            if g.mlp_layer_types[i] != DENSE:
                per_layer[i].append(("experts", _next_decision(it, i)))
        if next(it, None) is not None:
            raise ValueError("model.paths: a forward call logged more decisions than the geometry has "
                             "decision-making layers (a candidate model namespace running extra sublayers?)")
    out = []
    for parts in per_layer:
        sel = [a for kind, a in parts if kind == "selection"]
        exp = [a.reshape(B, -1, a.shape[-1]) for kind, a in parts if kind == "experts"]
        out.append(LayerDecisions(
            np.concatenate(sel, axis=1) if sel else None,
            np.concatenate(exp, axis=1).reshape(-1, exp[0].shape[-1]) if exp else None))
    return out


def _next_decision(it, layer: int):
    d = next(it, None)
    if d is None:
        raise ValueError(f"model.paths: a forward call logged no decision for layer {layer}: a model port that "
                         f"does not run the backend's mla / moe namespaces must report its own through "
                         f"backend.mla.record_selection and backend.moe.record_experts (docs/candidates.md §12)")
    return d[1]


def row_decisions(decisions: list, row: int, pad: int, S: int) -> list:
    """The decisions of batch row `row` from position `pad` on, as a batch-1 run of its real tokens
    sees them (selection positions shifted by the pad)."""
    out = []
    for d in decisions:
        sel = None if d.selection is None else np.where(d.selection[row:row + 1, pad:] >= 0,
                                                         d.selection[row:row + 1, pad:] - pad, -1)
        exp = None if d.experts is None else d.experts.reshape(-1, S, d.experts.shape[-1])[row, pad:]
        out.append(LayerDecisions(sel, exp))
    return out


def _same_decisions(a: list, b: list) -> bool:
    """Per layer, the same token set per query and the same expert set per token."""
    def sets(x):
        return None if x is None else [frozenset(r[r >= 0].tolist()) for r in to_int(x).reshape(-1, x.shape[-1])]
    return all(sets(x.selection) == sets(y.selection) and sets(x.experts) == sets(y.experts) for x, y in zip(a, b))


def _forceable(decisions: list, weights, T: int) -> bool:
    """The oracle can run these decisions: selections within the cache, k distinct experts in range."""
    for d, lw in zip(decisions, weights.layers):
        if d.selection is not None and not attendable(d.selection, T):
            return False
        if d.experts is not None:
            e = to_int(d.experts)
            if e.size and (e.min() < 0 or e.max() >= lw.mlp.num_experts
                           or any(len(set(r)) != len(r) for r in e.tolist())):
                return False
    return True


class OracleRun(NamedTuple):
    """The oracle's one prefill (logits, state) and its own decisions per layer (LayerTrace)."""

    logits: object
    state: object
    trace: list
    decisions: list


def oracle_run(weights, ids, mask, forced=None) -> OracleRun:
    """The oracle's one prefill, with `forced` decisions when given (its own otherwise)."""
    trace = []
    lg, st_ = om.forward(weights, ids, None, mask, decisions=forced, trace=trace)
    own = [LayerDecisions(None if t.selection is None else t.selection.indices,
                          None if t.routing is None else t.routing.expert_ids) for t in trace]
    return OracleRun(lg, st_, trace, own if forced is None else forced)


def conditioned_on(weights, ids, mask, decisions, whole: OracleRun) -> OracleRun:
    """The oracle re-run with an implementation's decisions (`whole` when they equal its own, or when
    they cannot be forced: their decision verdicts fail then)."""
    if _same_decisions(decisions, whole.decisions) or not _forceable(decisions, weights, ids.shape[1]):
        return whole
    event("decision differs from the oracle's: judged against the oracle re-run on it")
    return oracle_run(weights, ids, mask, decisions)


def decision_comparisons(path: str, decisions: list, ref: OracleRun, weights) -> list:
    """Each decision of a path, tie-aware against the oracle's own scores in the run conditioned on the
    same earlier decisions (its LayerTrace), one comparison per decision-making layer."""
    res = []
    for i, (d, tr, lw) in enumerate(zip(decisions, ref.trace, weights.layers)):
        if d.selection is not None and tr.selection is not None:
            tpool = token_pool(ref.state.layers[i].index_rows, lw.indexer)
            res.append(Comparison(path, "selection", d.selection, (tr.selection, tpool), kind="selection",
                                  where=f"layer {i}"))
        if d.experts is not None and tr.routing is not None:
            m = lw.mlp
            res.append(Comparison(path, "expert_ids", d.experts, RoutingReference(
                tr.routing, m.e_score_correction_bias, m.top_k, m.topk_group, m.n_group), kind="routing",
                where=f"layer {i}"))
    return res


# ----------------------------------------------------------------------------- state as arrays


def state_arrays(state, row=None, pad: int = 0) -> dict:
    """Every cached quantity of a HybridState as float64, stacked over layers (the worst element's
    first index is the layer's ordinal among its kind); `row`, `pad`: one batch row, real tokens only."""
    pick = (lambda a: a) if row is None else (lambda a: a[row:row + 1])
    tok = (lambda a: a) if row is None else (lambda a: a[row:row + 1, pad:])
    kda = [e for e in state.layers if isinstance(e, KDAState)]
    dsa = [e for e in state.layers if isinstance(e, DSACache)]
    rows = [to_numpy(tok(e.index_rows)) for e in dsa if e.index_rows is not None]
    # the pooled-key cache of the full layers; a state holding none (an implementation keeping no
    # pooled cache) has no pooled_keys, which the checks report as a missing output
    pooled = [to_numpy(tok(e.pooled)) for e in dsa if e.index_rows is not None and e.pooled is not None]
    out = {"kda_recurrent": [to_numpy(pick(e.recurrent)) for e in kda],
           "kda_conv": [to_numpy(pick(e.conv)) for e in kda],
           "dsa_latent": [to_numpy(tok(e.latent)) for e in dsa],
           "index_rows": [r[..., :-1] for r in rows],
           "valid_flags": [r[..., -1] for r in rows]}
    if pooled and len(pooled) == len(rows):
        out.update(pooled_keys=[p[..., :-1] for p in pooled], pool_flags=[p[..., -1] for p in pooled])
    out = {q: np.stack(v) for q, v in out.items() if v}
    if row is None:
        out["seq_len"] = np.array([state.seq_len], dtype=np.float64)
    return out


EXACT = ("valid_flags", "pool_flags", "seq_len")
# each state quantity's dimensions (state_arrays stacks the layers of one kind first), for messages
STATE_AXES = {"kda_recurrent": ("layer", "batch", "head", "key", "value"), "kda_conv": ("layer", "batch", "channel", "tap"),
              "dsa_latent": ("layer", "batch", "token", "rank"), "index_rows": ("layer", "batch", "token", "channel"),
              "valid_flags": ("layer", "batch", "token"), "seq_len": ("count",),
              "pooled_keys": ("layer", "batch", "pool end token", "channel"),
              "pool_flags": ("layer", "batch", "pool end token")}


def _state_comparisons(path: str, ac: dict, ar: dict, ab, kind: str, abr=None) -> list:
    """One comparison per state quantity of the reference (exact for flags and seq_len)."""
    res = []
    for q, r in ar.items():
        k = "exact" if q in EXACT else kind
        res.append(Comparison(path, q, ac.get(q), r, None if ab is None or k == "exact" else ab.get(q), kind=k,
                              baseline_reference=None if abr is None or k == "exact" else abr.get(q),
                              axes=STATE_AXES.get(q, ())))
    return res


def compare(path: str, cand, ref, real, base=None, kind: str = "kernel_replacement", base_ref=None) -> list:
    """Comparisons of one path: logits at the real positions, then every state quantity; `base_ref`:
    what the baseline is measured against (the oracle run with the baseline's decisions; default ref)."""
    (lc, scand), (lr, sref) = cand[:2], ref[:2]
    lb = None if base is None else to_numpy(base[0])[real]
    lbr = None if base_ref is None else to_numpy(base_ref[0])[real]
    res = [Comparison(path, "logits", to_numpy(lc)[real], to_numpy(lr)[real], lb, kind=kind, baseline_reference=lbr)]
    ab = None if base is None else state_arrays(base[1])
    abr = None if base_ref is None else state_arrays(base_ref[1])
    return res + _state_comparisons(path, state_arrays(scand), state_arrays(sref), ab, kind, abr)


def padded_rows(case: ModelCase):
    return [(r, p) for r, p in enumerate(case.left_pad) if p > 0]


def compare_padded(path: str, cand, alone: dict, base=None, kind: str = "kernel_replacement",
                   base_alone: dict = None) -> list:
    """Each left-padded row (its real tokens: logits and state) vs the same tokens alone, unpadded;
    `alone` / `base_alone`: {(row, pad): (logits, state)} the candidate's / baseline's references."""
    res = []
    for (r, p), ref in alone.items():
        la, sa = ref[:2]
        lb = None if base is None else to_numpy(base[0])[r:r + 1, p:]
        bref = None if base_alone is None else base_alone[(r, p)]
        res.append(Comparison(path, "logits", to_numpy(cand[0])[r:r + 1, p:], to_numpy(la), lb, kind=kind,
                              baseline_reference=None if bref is None else to_numpy(bref[0])))
        ar = state_arrays(sa)
        ar.pop("seq_len")                                  # the padded row's cache also holds its pads
        abr = None
        if bref is not None:
            abr = state_arrays(bref[1])
            abr.pop("seq_len")
        ab = None if base is None else state_arrays(base[1], r, p)
        res += _state_comparisons(path, state_arrays(cand[1], r, p), ar, ab, kind, abr)
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
    """SPEC §3, §10: every path on candidate, baseline and oracle vs the oracle's one prefill.

    Decision-conditioned (invariants/contracts.d/model.toml): each path's DSA selections and MoE
    expert choices are judged tie-aware, layer by layer, against the oracle's own scores in a run given
    the same earlier decisions; its logits and states against the oracle's one prefill RE-RUN WITH THAT
    PATH'S decisions (the baseline's against the oracle with the baseline's): a legal bf16 flip neither
    false-alarms nor inflates the baseline's error.
    """
    g = geometry_of(case.base, case.layers)
    k = decode_steps(case)
    _label(case, k)
    ids, mask = prompt(case, g)
    real = mask.astype(bool)
    weights = oracle_weights(case.base, case.layers, case.model_seed)
    oracle = oracle_side(weights)
    whole = oracle_run(weights, ids, mask)
    pads = padded_rows(case)
    alone = {(r, p): oracle_run(weights, ids[r:r + 1, p:], mask[r:r + 1, p:]) for r, p in pads}
    # the baseline persists too: the bf16-persisted path's scale holds the quantization the candidate's does
    runs = {n: run_paths(s, ids, mask, case, () if n == "oracle" else PERSISTED) for n, s in
            (("cand", target_side(cand, case)), ("base", target_side(base, case)), ("oracle", oracle))}
    B, S = ids.shape
    judged = [p for p in runs["cand"] if p in PATHS or p.removeprefix("continuation_") in PERSISTED]
    dec = {(n, path): path_decisions(g, runs[n][path].calls, B) for n in ("cand", "base") for path in judged}
    ref = {key: conditioned_on(weights, ids, mask, d, whole) for key, d in dec.items()}
    res = []
    for path in judged:
        res += decision_comparisons(path, dec["cand", path], ref["cand", path], weights)
        res += compare(path, runs["cand"][path], ref["cand", path], real, runs["base"][path],
                       base_ref=ref["base", path])
    for path in PATHS:
        res += compare(f"oracle_{path}", runs["oracle"][path], whole, real, kind="self_consistency")
    res += handoff_comparisons(runs["cand"], ids.shape[1] - k)

    def alone_given(n):
        return {(r, p): conditioned_on(weights, ids[r:r + 1, p:], mask[r:r + 1, p:],
                                       row_decisions(dec[n, "chunked_prefill"], r, p, S), alone[r, p])
                for r, p in pads}
    res += compare_padded("padded_row", runs["cand"]["chunked_prefill"], alone_given("cand"),
                          runs["base"]["chunked_prefill"], base_alone=alone_given("base"))
    res += compare_padded("oracle_padded_row", whole, alone, kind="self_consistency")
    return res


# ----------------------------------------------------------------------------- the record

_TINY = Geometry.preset("tiny")

CHECKS = (
    Check("model.paths", "model", ModelCase, model_cases, run_model_paths,
          "whole decoder: split prefill, token decode, serialize+restore, left-padded rows vs the oracle's one "
          "prefill: logits and every state array; the oracle's own paths agree",
          # two rows, one left-padded by 3, cut 2 + 4, then 2 decode steps: every path crosses the padding
          # (~24 s on the interpreter, a drawn example 5-25 s: one drawn on the CPU)
          examples=(ModelCase("tiny", model_cut(_TINY), 0, 2, 6, (0, 3), (2, 4), 2, 1),), cpu_examples=1),
)

