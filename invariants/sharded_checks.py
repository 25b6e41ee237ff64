"""model.sharded: the decoder served tensor- and expert-parallel (impl/sharded.py) against itself
unsharded and against the float64 oracle (issue 15; SPEC §3, §5-§10).

A prompt batch runs model.paths' paths (chunked_prefill, token_decode, continuation: invariants/
model_checks.py) through the candidate's namespaces composed by the sharded decoder on `world` ranks
(impl/sharded_pool.py: gloo on the CPU, NCCL on CUDA), through the same composition unsharded (world
1, in this process) and through the torch baseline unsharded. Compared, per path:

    sharded_<path>            the sharded run vs the oracle's one prefill re-run with the sharded run's
                              own decisions: kernel_replacement (model.paths' contracts; the baseline's
                              error is its unsharded run's), decisions tie-aware
    sharded_vs_whole_<path>   the sharded run vs world 1 of the SAME implementation: only the order of
                              the partial sums differs, so a tight self_consistency bound (measured)
    ranks                     every rank's logits, gathered state and decisions vs rank 0's, bit for bit:
                              replicated work on identical inputs (after each all-reduce every rank holds
                              the same sum) must give identical bits, and a rank that selects or routes
                              otherwise is a sharding bug even when the sum hides it

The model is the smallest decoder holding every sharded sublayer (`sharded_geometry`): a KDA layer with
the dense MLP, then a full DSA layer with the MoE; attention_bias on (o_proj's bias added once), the
top-k one pool wide (real selection from 2·kpool tokens, within the interpreter's short prompts).
"""
from __future__ import annotations

import atexit
import dataclasses
import functools
import shutil
import tempfile
from typing import NamedTuple

import numpy as np
import torch
from hypothesis import strategies as st

from invariants.check import Check, NotRunnable
from invariants.compare import Comparison, to_int, to_numpy
from invariants.labels import label as event
from invariants.model_checks import (EXACT, PATHS, ModelCase, Side, _next_decision, _RecordRouting,
                                     _RecordSelections, named_geometry, require_memory, _same_decisions, compare, conditioned_on,
                                     decision_comparisons, decode_steps,
                                     legal_splits, model_lengths, oracle_run, path_decisions, prompt, run_paths,
                                     state_arrays)
from invariants.target import Target
from oracle import checkpoint as ock
from oracle.config import DENSE, LINEAR, SHARED, Geometry
from oracle.types import LayerDecisions
from strategies.sequences import chunk_splits, left_pads
from strategies.tensors import SEEDS

WORLDS = (2, 4)


class ShardedCase(NamedTuple):
    """A prompt batch through the decoder sharded over `world` ranks: `sharded_geometry(base, world)`,
    random weights from `model_seed`, ids from `seed` (ModelCase's fields otherwise)."""

    base: str
    world: int
    model_seed: int
    batch: int
    length: int
    left_pad: tuple[int, ...]
    splits: tuple[int, ...]
    decode_steps: int
    seed: int
    nvfp4: str = ""           # "": a bf16 checkpoint; "modelopt": its routed experts NVFP4 (W4A16 where taken)

    def paths_case(self) -> ModelCase:
        """The same prompt as model.paths reads it (its paths and prompt builder take a ModelCase)."""
        return ModelCase(self.base, 2, self.model_seed, self.batch, self.length, self.left_pad, self.splits,
                         self.decode_steps, self.seed)


# ----------------------------------------------------------------------------- geometry and models


def _round_up(n: int, world: int) -> int:
    return -(-n // world) * world


@functools.lru_cache(maxsize=8)
def sharded_geometry(base: str, world: int) -> Geometry:
    """`base` (a preset name or config JSON) as the smallest decoder with every sharded sublayer: layer 0
    KDA + dense MLP, layer 1 full DSA + MoE; attention_bias on; index_topk = index_kpool (one pool
    selected: real top-k from 2·kpool tokens); MLA and KDA heads rounded up to a multiple of `world`
    (the tiny preset's 2 heads become 4 at world 4). Other dimensions stay: impl.sharded.check_world
    says which one does not divide."""
    g = named_geometry(base)
    h = _round_up(g.num_attention_heads, world)
    return g.replace(num_hidden_layers=2, layer_types=(LINEAR, "indexed_attention"), mlp_layer_types=(DENSE, "sparse"),
                     indexer_types=("full", "full"), attention_bias=True, index_topk=g.index_kpool,
                     num_attention_heads=h, num_key_value_heads=h,
                     linear_num_heads=_round_up(g.linear_num_heads, world))


def worlds(base: str) -> tuple[int, ...]:
    """The rank counts drawn: those the geometry divides and this machine affords. The interpreter runs
    world 2 only (ranks share the CPU's cores: each example costs `world` interpreted decoders); CUDA
    draws every world up to its device count (rank r on cuda:r)."""
    from impl import interpreted
    from impl.sharded import ShardingError, check_world
    if interpreted():
        afford = (2,)
    else:
        n = torch.cuda.device_count()
        afford = tuple(w for w in WORLDS if w <= n) or (2,)     # none: the run says NOT RUN, naming the need
    ok = []
    for w in afford:
        try:
            check_world(sharded_geometry(base, w), w)
            ok.append(w)
        except ShardingError:
            pass
    return tuple(ok)


_DIRS: list = []


@atexit.register
def _remove_checkpoints() -> None:
    for d in _DIRS:
        shutil.rmtree(d, ignore_errors=True)


@functools.lru_cache(maxsize=6)
def checkpoint(base: str, world: int, seed: int, nvfp4: str = "") -> str:
    """A random checkpoint of sharded_geometry(base, world) written once per process: the ranks load it
    from disk, as a served model's ranks do (removed at exit). nvfp4: its routed experts quantized in that
    layout (oracle.checkpoint.write_random: the same masters, each of gate, up, down with its own scale)."""
    require_memory(sharded_geometry(base, world), "model.sharded")
    d = tempfile.mkdtemp(prefix="glmgate-sharded-")
    _DIRS.append(d)
    ock.write_random(d, sharded_geometry(base, world), seed, nvfp4=nvfp4 or None)
    return d


@functools.lru_cache(maxsize=6)
def oracle_weights(base: str, world: int, seed: int, nvfp4: str = ""):
    return ock.load(checkpoint(base, world, seed, nvfp4))


@functools.lru_cache(maxsize=12)
def target_weights(base: str, world: int, seed: int, device: str, dtype: torch.dtype, nvfp4: str = ""):
    from impl.model import to_torch
    # an NVFP4 checkpoint's codes kept: the decoder runs them where the implementation's MoE takes them
    return to_torch(oracle_weights(base, world, seed, nvfp4), device, dtype, nvfp4=True)


# ----------------------------------------------------------------------------- strategy


# prompt lengths: the interpreter runs every example's paths three times (world 1, and `world` ranks
# sharing the cores), so the CPU stops at 10 (past 2·kpool = 8: one pool of two is selected); compiled
# kernels take 24
MAX_LEN = {"interpreter": 10, "compiled": 24}


@st.composite
def sharded_cases(draw, base: Geometry, *, max_len=None) -> ShardedCase:
    """model.paths' prompt draws (length, batch, splits, model seed, decode steps, left pads) on the
    sharded geometry of `base`, and a world this machine affords."""
    from impl import interpreted
    from invariants.model_checks import base_name
    if max_len is None:
        max_len = MAX_LEN["interpreter" if interpreted() else "compiled"]
    name = base_name(base)
    avail = worlds(name)
    if not avail:
        # no world divides this geometry: the case says so when it runs (impl.sharded.check_world)
        avail = (2,)
    world = draw(st.sampled_from(avail))
    g = sharded_geometry(name, world)
    length, batch = draw(model_lengths(g, max_len)), draw(st.integers(1, 2))
    splits, model_seed = draw(chunk_splits(length, max_parts=3)), draw(st.integers(0, 2))
    steps, seed = draw(st.integers(0, 3)), draw(SEEDS)
    pad = draw(left_pads(batch, length, max_pad=4))
    return ShardedCase(name, world, model_seed, batch, length, pad, legal_splits(splits, max(pad)), steps, seed)


# ----------------------------------------------------------------------------- sides


class ShardedSide(NamedTuple):
    """A Side over the ranks, and every rank's answer to each forward call (the cross-rank comparisons)."""

    side: Side
    ranks: list
    model: object = None      # the ShardedModel (its forward_packed: the packed path)


def sharded_side(t: Target, case: ShardedCase) -> ShardedSide:
    """The candidate's namespaces composed by impl.sharded's decoder on case.world ranks; each rank
    resolves the candidate by its registry name. Logs rank 0's decisions, as target_side logs its own."""
    from impl.sharded_pool import ShardedModel
    from impl.state import HybridState
    if str(t.device).startswith("cuda") and torch.cuda.device_count() < case.world:
        raise NotRunnable(f"model.sharded: world {case.world} on CUDA needs {case.world} devices (rank r on "
                          f"cuda:r), this host has {torch.cuda.device_count()}")
    model = ShardedModel(checkpoint(case.base, case.world, case.model_seed, case.nvfp4), case.world, t.device, t.dtype,
                         t.impl.name, poison=True)
    calls, ranks = [], []

    def forward(ids, mask, state):
        out = model.forward(ids, mask, state)
        calls.append(list(model.ranks[0]["log"]))
        ranks.append(model.ranks)
        return out

    return ShardedSide(Side(forward, lambda s, kda_dtype=None: s.serialize(kda_dtype),
                            lambda b: HybridState.deserialize(b, device=t.device), calls), ranks, model)


def whole_side(t: Target, case: ShardedCase) -> Side:
    """The same namespaces composed by impl.model's decoder in this process (world 1); the sharded
    decoder is that composition, so this is the candidate's unsharded self."""
    from impl import model as im
    wt = target_weights(case.base, case.world, case.model_seed, t.device, t.dtype, case.nvfp4)
    log, calls = [], []
    be = t.impl._replace(mla=_RecordSelections(t.impl.mla, log), moe=_RecordRouting(t.impl.moe, log))

    def forward(ids, mask, state):
        log.clear()
        with t.poisoned(), torch.no_grad():
            out = im.forward(wt, torch.as_tensor(ids, device=t.device), state, torch.as_tensor(mask, device=t.device), be)
        calls.append(list(log))
        return out

    return Side(forward, lambda s, kda_dtype=None: s.serialize(kda_dtype),
                lambda b: im.deserialize(b, device=t.device), calls)


# ----------------------------------------------------------------------------- comparisons


def _decisions(log: list) -> dict:
    """A call's decision log as {"selection": ..., "expert_ids": ...}: each kind's arrays flattened into
    one float64 array (exact compare: a rank that logged more, fewer or other decisions differs)."""
    out = {"selection": [np.zeros(0)], "expert_ids": [np.zeros(0)]}
    for kind, a in log:
        out["selection" if kind == "selection" else "expert_ids"].append(np.ravel(to_int(a)).astype(np.float64))
    return {q: np.concatenate(v) for q, v in out.items()}


def _answer_states(a: dict) -> dict:
    """A rank's answer's state arrays: its state, or (a packed step) each document's, concatenated."""
    from impl.state import HybridState
    if "state" in a:
        return state_arrays(HybridState.deserialize(a["state"]))
    docs = [state_arrays(HybridState.deserialize(b)) for b in a["states"]]
    return {q: np.concatenate([np.ravel(d[q]) for d in docs]) for q in docs[0]}


def rank_comparisons(answers: list) -> list:
    """Every rank's answers vs rank 0's, exact: the logits, each gathered state array and the decisions
    of every forward call (a packed step's: every document's state); one comparison per quantity (ranks
    > 0 and calls concatenated)."""
    cand, ref = {}, {}
    for call in answers:
        seen = [(a["logits"], _answer_states(a), _decisions(a["log"])) for a in call]
        for logits, states, decisions in seen[1:]:
            items = [("logits", logits, seen[0][0])] + [(q, states[q], seen[0][1][q]) for q in seen[0][1]]
            items += [(q, decisions[q], seen[0][2][q]) for q in decisions]
            for q, c, d in items:
                cand.setdefault(q, []).append(np.ravel(np.asarray(c, dtype=np.float64)))
                ref.setdefault(q, []).append(np.ravel(np.asarray(d, dtype=np.float64)))
    return [Comparison("ranks", q, np.concatenate(cand[q]), np.concatenate(ref[q]), kind="exact") for q in ref]


def _same_logs(a: list, b: list) -> bool:
    """Two decision logs with the same decisions: each selection's token set per query, each expert set
    per token (the order within a row is free)."""
    def sets(x):
        x = to_int(x)
        return [frozenset(r[r >= 0].tolist()) for r in x.reshape(-1, x.shape[-1])]
    return len(a) == len(b) and all(ka == kb and sets(x) == sets(y) for (ka, x), (kb, y) in zip(a, b))


def packed_decisions(g: Geometry, log: list, cu) -> dict:
    """A packed step's logged decisions split per document: {document: one LayerDecisions per layer}.

    A full DSA layer attends one document at a time (each over its own cache), so it logs one selection
    [1, L_d, W] per non-empty document, in document order; an MoE layer routes the whole flat step and
    logs expert ids [T, k], of which a document's are its rows cu[d]:cu[d + 1]."""
    docs = [d for d in range(len(cu) - 1) if cu[d + 1] > cu[d]]
    per = {d: [[None, None] for _ in range(g.num_hidden_layers)] for d in docs}
    it = iter(log)
    for i in range(g.num_hidden_layers):
        if g.layer_types[i] != LINEAR and g.indexer_types[i] != SHARED:
            for d in docs:
                per[d][i][0] = _next_decision(it, i)
        if g.mlp_layer_types[i] != DENSE:
            e = _next_decision(it, i)
            for d in docs:
                per[d][i][1] = e[cu[d]:cu[d + 1]]
    if next(it, None) is not None:
        raise ValueError("model.sharded: a packed step logged more decisions than its documents and the "
                         "geometry's decision-making layers account for")
    return {d: [LayerDecisions(*x) for x in per[d]] for d in docs}


def _joined(calls: list) -> list:
    """One document's per-call decisions as one run's: selections along the tokens, expert rows appended."""
    out = []
    for parts in zip(*calls):
        sel = [p.selection for p in parts if p.selection is not None]
        exp = [p.experts for p in parts if p.experts is not None]
        out.append(LayerDecisions(np.concatenate(sel, axis=1) if sel else None,
                                  np.concatenate(exp, axis=0) if exp else None))
    return out


def _packed_run(t: Target, case: ShardedCase, calls: list) -> list:
    """The target's unsharded forward_packed over the calls: per call (logits [T, V], states, decision log)."""
    from impl import model as im
    wt = target_weights(case.base, case.world, case.model_seed, t.device, t.dtype, case.nvfp4)
    log, out, states = [], [], None
    be = t.impl._replace(mla=_RecordSelections(t.impl.mla, log), moe=_RecordRouting(t.impl.moe, log))
    for flat, c in calls:
        log.clear()
        with t.poisoned(), torch.no_grad():
            lg, states = im.forward_packed(wt, torch.as_tensor(flat, device=t.device),
                                           torch.as_tensor(c, device=t.device), states or [None] * (len(c) - 1), be)
        out.append((lg, states, list(log)))
    return out


def packed_oracle_comparisons(case: ShardedCase, g: Geometry, weights, calls: list, sharded: list,
                              base: list) -> list:
    """Each document of the sharded packed steps against the oracle's ONE prefill of that document's
    tokens so far, re-run with the document's own decisions (as model.paths holds every path), its
    decisions tie-aware against that run's scores; the baseline's packed run likewise (`sharded_packed`,
    kernel_replacement). calls: [(flat ids, cu)]; sharded, base: per call (logits [T, V], states, log)."""
    docs = range(len(calls[0][1]) - 1)
    toks = {d: [] for d in docs}
    dec = {"sharded": {d: [] for d in docs}, "base": {d: [] for d in docs}}
    res = []
    for i, (flat, c) in enumerate(calls):
        where = ("prefill", "decode")[i]
        for who, run in (("sharded", sharded), ("base", base)):
            for d, ld in packed_decisions(g, run[i][2], c).items():
                dec[who][d].append(ld)
        for d in docs:
            if c[d + 1] == c[d]:
                continue
            toks[d].extend(int(x) for x in flat[c[d]:c[d + 1]])
            ids = np.asarray(toks[d])[None]
            mask = np.ones_like(ids)
            whole = oracle_run(weights, ids, mask)
            ref = conditioned_on(weights, ids, mask, _joined(dec["sharded"][d]), whole)
            ref_base = conditioned_on(weights, ids, mask, _joined(dec["base"][d]), whole)
            if i == len(calls) - 1:
                # the document's decisions over every call, as model.paths judges a path's
                res += [dataclasses.replace(r, where=f"document {d}: {r.where}")
                        for r in decision_comparisons("sharded_packed", _joined(dec["sharded"][d]), ref, weights)]
            n = c[d + 1] - c[d]
            real = np.zeros(ids.shape, dtype=bool)
            real[:, -n:] = True

            def doc(run, n=n, d=d):
                lg = to_numpy(run[i][0])[c[d]:c[d + 1]]
                full = np.zeros((1, ids.shape[1], lg.shape[-1]))
                full[0, -n:] = lg
                return full, run[i][1][d]
            res += [dataclasses.replace(r, where=f"document {d} {where}" + (f": {r.where}" if r.where else ""))
                    for r in compare("sharded_packed", doc(sharded), ref, real, doc(base), base_ref=ref_base)]
    event("packed documents against the oracle")
    return res


def packed_comparisons(case: ShardedCase, t: Target, base: Target, sharded: ShardedSide, ids, mask, weights) -> list:
    """The packed path (several documents flat, one state each): the prompt's rows as documents (their
    real tokens) packed into one prefill step from empty states, then one packed decode token each from
    its own state. The sharded model against the same namespaces' unsharded forward_packed
    (`sharded_vs_whole_packed`, self_consistency; skipped with an event from the step where a decision
    differs), against the oracle per document (`sharded_packed`, packed_oracle_comparisons), and every
    rank's answers bitwise alike (`ranks`)."""
    g = sharded_geometry(case.base, case.world)
    docs = [ids[b][mask[b].astype(bool)] for b in range(ids.shape[0])]
    cu = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
    calls = [(np.concatenate(docs), cu),
             (np.array([(int(d[-1]) * 7 + 3) % g.vocab_size for d in docs]), np.arange(len(docs) + 1))]
    res, answers, runs, states = [], [], [], [None] * len(docs)
    for flat, c in calls:
        lg, states = sharded.model.forward_packed(flat, c, states)
        answers.append(sharded.model.ranks)
        runs.append((lg, states, list(sharded.model.ranks[0]["log"])))
    whole = _packed_run(t, case, calls)
    for i, ((lg_s, s_states, s_log), (lg_w, w_states, w_log)) in enumerate(zip(runs, whole)):
        if not _same_logs(s_log, w_log):
            event("a decision differs between the sharded and the unsharded packed step")
            break
        where = ("prefill", "decode")[i]
        res.append(Comparison("sharded_vs_whole_packed", "logits", lg_s, lg_w, kind="self_consistency", where=where))
        got, want = [state_arrays(x) for x in s_states], [state_arrays(x) for x in w_states]
        for q in want[0]:
            k = "exact" if q in EXACT else "self_consistency"
            res.append(Comparison("sharded_vs_whole_packed", q, np.concatenate([np.ravel(g_[q]) for g_ in got]),
                                  np.concatenate([np.ravel(w[q]) for w in want]), kind=k, where=where))
    event("packed documents over the ranks")
    res += packed_oracle_comparisons(case, g, weights, calls, runs, _packed_run(base, case, calls))
    return res + rank_comparisons(answers)


def run_sharded(case: ShardedCase, cand: Target, base: Target) -> list:
    """SPEC §3, §5-§10 on world ranks: see the module docstring."""
    from impl.sharded import ShardingError, check_world
    g = sharded_geometry(case.base, case.world)
    try:
        check_world(g, case.world)
    except ShardingError as e:
        # the geometry under test does not divide over this world: nothing to judge, and no fault of the candidate
        raise NotRunnable(f"model.sharded: {e}") from e
    mc = case.paths_case()
    k = decode_steps(mc)
    if k:
        event("one-token decode steps")
    if len(case.splits) > 1:
        event("prefill cut into calls")
    if case.length >= g.index_topk + g.index_kpool:
        event("real top-k sparsity")
    ids, mask = prompt(mc, g)
    real = mask.astype(bool)
    if case.nvfp4:
        event(f"NVFP4 routed experts ({case.nvfp4}) cut over the ranks")
    weights = oracle_weights(case.base, case.world, case.model_seed, case.nvfp4)
    whole = oracle_run(weights, ids, mask)
    sharded = sharded_side(cand, case)        # the ranks start and load while this process runs world 1
    runs = {"whole": run_paths(whole_side(cand, case), ids, mask, mc), "base": run_paths(whole_side(base, case), ids, mask, mc)}
    runs["sharded"] = run_paths(sharded.side, ids, mask, mc)
    B = ids.shape[0]
    dec = {(n, p): path_decisions(g, runs[n][p].calls, B) for n in runs for p in PATHS}
    res = []
    for p in PATHS:
        ref = conditioned_on(weights, ids, mask, dec["sharded", p], whole)
        ref_base = conditioned_on(weights, ids, mask, dec["base", p], whole)
        res += decision_comparisons(f"sharded_{p}", dec["sharded", p], ref, weights)
        res += compare(f"sharded_{p}", runs["sharded"][p], ref, real, runs["base"][p], base_ref=ref_base)
        if _same_decisions(dec["sharded", p], dec["whole", p]):
            res += compare(f"sharded_vs_whole_{p}", runs["sharded"][p], runs["whole"][p], real, kind="self_consistency")
        else:
            # a near-tie decided otherwise on the other summation order: every value downstream moves, and
            # the decisions themselves are judged tie-aware against the oracle above
            event("a decision differs between the sharded and the unsharded run")
    return res + rank_comparisons(sharded.ranks) + packed_comparisons(case, cand, base, sharded, ids, mask, weights)


# ----------------------------------------------------------------------------- the record

CHECKS = (
    Check("model.sharded", "model", ShardedCase, sharded_cases, run_sharded,
          "the decoder tensor/expert-parallel over world ranks (torch.distributed): split prefill, token decode, "
          "restore vs world 1 of the same implementation (tight), vs the oracle, and every rank bitwise alike",
          # one row, world 2, 8 tokens (the last query picks one of two pools), cut 4 + 4, one decode step:
          # ~11 s on the interpreter once the ranks are up (world 1 in this process, then both ranks); the
          # seed is one whose last query the indexer sharded on one rank picks otherwise (its mutant)
          examples=(ShardedCase("tiny", 2, 0, 1, 8, (0,), (4, 4), 1, 2),
                    # the same prompt over an NVFP4 checkpoint: each rank's expert codes, block scales and
                    # its experts' own global scales (W4A16 kernels on ours)
                    ShardedCase("tiny", 2, 0, 1, 8, (0,), (4, 4), 1, 2, "modelopt")), cpu_examples=1,
          # the mechanism namespaces the ranks compose (a model port's forward is not what they run)
          needs=("kda", "dsa", "mla", "mhc", "moe")),
)
