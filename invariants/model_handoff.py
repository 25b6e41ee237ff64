"""The whole decoder's state hand-off in model.paths: the persisted dtype made explicit (SERVING.md B3.2).

A prefix cache persists a HybridState snapshot (serialize) and a later request restores it (the model
namespace's deserialize). Two declared persisted dtypes for the KDA recurrent state, judged differently:

  continuation           the state's own dtype (float32, SPEC §2): the hand-off is EXACT. Every
                         restored array must equal the snapshot's bit for bit
                         (model.continuation.handoff [exact]): a cache that persists in bf16 where
                         float32 is declared changes greedy tokens and passes every tolerance of the
                         continuation's logits.
  continuation_bfloat16  persisted in bfloat16: a QUANTIZATION. The restored recurrent state must be a
                         faithful bf16 rounding of the snapshot (relative error below one bf16 ulp, 2^-7;
                         round to nearest stays within 2^-8; kind `persisted`), every other array exact.
                         Two views of what follows:
                         - a path like the others (model_checks.PATHS): its decisions tie-aware, its
                           logits and final state against the oracle's one prefill re-run with ITS
                           decisions, the baseline persisting the same way as the scale
                           (kernel_replacement: the quantization is in both);
                         - `quantization`: its later logits against the SAME candidate's exact
                           continuation (the snapshot in its own dtype) under the quantization gate (KL /
                           top-1): the persisting's own effect, not the candidate's bf16 error. Only the
                           tokens before a row's first decision that differs between the two runs are
                           judged there: a near-tie the 2^-8 perturbation flips (a DSA pool, an expert)
                           moves that token's logits by the flip, not by the quantization, and every
                           later token of the row sees it (the first view judges the flip tie-aware and
                           those tokens against the oracle given the flip).

model_checks.py imports this module; the helpers it needs from there are imported where used.
"""
from __future__ import annotations

import numpy as np

from invariants.compare import Comparison, to_numpy
from invariants.labels import label

# the KDA dtypes model.paths also persists the candidate's snapshot in (beside its own, float32)
PERSISTED = ("bfloat16",)


def persisted_continuation(side, blob: bytes, held: dict, ids, mask, P: int, prefix: tuple):
    """The path that continues tokens P.. from a snapshot persisted as `blob`: a PathRun whose logits
    are the prefix call's then the continued ones [B, S, V], whose calls are the prefix call's log and
    its own, and whose hand-off is (held, the restored arrays). prefix: (prefix logits, prefix log)."""
    from invariants.model_checks import PathRun, state_arrays

    lp, prefix_log = prefix
    first = len(side.log)
    restored = side.deserialize(blob)
    arrays = state_arrays(restored)
    lg, state = side.forward(ids[:, P:], mask, restored)
    return PathRun(np.concatenate([to_numpy(lp), to_numpy(lg)], axis=1), state, prefix_log + side.log[first:],
                   (held, arrays))


def _token_decisions(call: list, B: int) -> list:
    """One call's logged decisions as, per record, a [B, n] list of frozensets (the token set a query
    attended, the expert set a token took): the form two runs' decisions are compared in."""
    out = []
    for _, a in call:
        a = np.asarray(a)
        rows = a.reshape(B, -1, a.shape[-1])
        out.append([[frozenset(r[r >= 0].tolist()) for r in row] for row in rows])
    return out


def unflipped_tokens(exact_call: list, persisted_call: list, B: int, n: int) -> list:
    """Per batch row, the number of continued tokens before the first one whose decisions (any layer)
    differ between the exact and the persisted continuation call (n where none differs)."""
    a, b = _token_decisions(exact_call, B), _token_decisions(persisted_call, B)
    if len(a) != len(b):
        raise ValueError(f"model.paths: the exact continuation logged {len(a)} decisions and the persisted one "
                         f"{len(b)}: the same call must make the same number of decisions")
    keep = [n] * B
    for ra, rb in zip(a, b):
        for row in range(B):
            for t, (x, y) in enumerate(zip(ra[row], rb[row])):
                if x != y:
                    keep[row] = min(keep[row], t)
                    break
    return keep


def handoff_comparisons(runs: dict, P: int) -> list:
    """The candidate's hand-offs (`runs`: its paths, run_paths with PERSISTED) against the snapshot they
    restore, and the persisted continuations' later logits against the exact continuation's at the same
    positions (P.., real tokens: model_checks.decode_steps) before each row's first decision flip."""
    from invariants.model_checks import STATE_AXES

    res = []
    for path, run in runs.items():
        if run.handoff is None:
            continue
        held, restored = run.handoff
        persisted = path != "continuation"
        for q, want in held.items():
            kind = "persisted" if persisted and q == "kda_recurrent" else "exact"
            res.append(Comparison(path, "handoff", restored.get(q), want, kind=kind, where=q,
                                  axes=STATE_AXES.get(q, ())))
        if persisted:
            label(f"snapshot persisted in {path.removeprefix('continuation_')}")
            res.append(_quantization(path, run, runs["continuation"], P))
    return res


def _quantization(path: str, run, exact, P: int) -> Comparison:
    """The persisted continuation's logits against the exact continuation's, tokens before each row's
    first decision flip. Against the oracle the bf16 candidate's own logit error (judged by the path's
    kernel_replacement contract) swamps the quantization: KL mean 8.5e-4 on the H200 with no bug present;
    and a flipped DSA pool at a near-tie gave 8.6e-4 against the exact continuation (glmgate repro of
    model.paths, torch bf16, model_seed 1, seed 11229)."""
    ref, cand = np.asarray(exact.logits)[:, P:], np.asarray(run.logits)[:, P:]
    B, n, V = ref.shape
    keep = unflipped_tokens(exact.calls[-1], run.calls[-1], B, n)
    flipped = sum(n - k for k in keep)
    if flipped:
        label("persisted continuation: a decision flipped against the exact one (judged tie-aware as a path)")
    sel = [(r, t) for r in range(B) for t in range(keep[r])]
    rows, toks = (np.array([r for r, _ in sel], dtype=int), np.array([t for _, t in sel], dtype=int))
    where = (f"{len(sel)} of {B * n} continued tokens (the other {flipped} follow a decision flip: "
             f"judged against the oracle given it, {path}.logits)") if flipped else ""
    return Comparison(path, "quantization", cand[rows, toks].reshape(-1, V), ref[rows, toks].reshape(-1, V),
                      kind="quantization_gate", where=where)
