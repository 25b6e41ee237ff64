"""The whole decoder's state hand-off in model.paths: the persisted dtype made explicit (SERVING.md B3.2).

A prefix cache persists a HybridState snapshot (serialize) and a later request restores it (the model
namespace's deserialize). Two declared persisted dtypes for the KDA recurrent state, judged differently:

  continuation           the state's own dtype (float32, SPEC §2): the hand-off is EXACT. Every
                         restored array must equal the snapshot's bit for bit
                         (model.continuation.handoff [exact]): a cache that persists in bf16 where
                         float32 is declared changes greedy tokens and passes every tolerance of the
                         continuation's logits.
  continuation_bfloat16  persisted in bfloat16: a QUANTIZATION, never a kernel replacement. The
                         restored recurrent state must be a faithful bf16 rounding of the snapshot
                         (relative error below one bf16 ulp, 2^-7; round to nearest stays within
                         2^-8; kind `persisted`), every other array exact, and the later logits are
                         held to the same candidate's exact continuation (the snapshot in its own
                         dtype) by the quantization gate (KL / top-1): the quantization's own effect,
                         not the candidate's bf16 error, which model.continuation already bounds.

model_checks.py imports this module; the helpers it needs from there are imported where used.
"""
from __future__ import annotations

import numpy as np

from invariants.compare import Comparison, to_numpy
from invariants.labels import label

# the KDA dtypes model.paths also persists the candidate's snapshot in (beside its own, float32)
PERSISTED = ("bfloat16",)


def persisted_continuation(side, blob: bytes, held: dict, ids, mask, P: int):
    """The continuation of tokens P.. from a snapshot persisted as `blob`: a PathRun whose logits are
    the continued positions only [B, S - P, V] and whose hand-off is (held, the restored arrays)."""
    from invariants.model_checks import PathRun, state_arrays

    first = len(side.log)
    restored = side.deserialize(blob)
    arrays = state_arrays(restored)
    lg, state = side.forward(ids[:, P:], mask, restored)
    return PathRun(to_numpy(lg), state, side.log[first:], (held, arrays))


def handoff_comparisons(runs: dict, P: int) -> list:
    """The candidate's hand-offs (`runs`: its paths, run_paths with PERSISTED) against the snapshot they
    restore, and the persisted continuations' later logits against the exact continuation's at the same
    positions (P.., real tokens: model_checks.decode_steps)."""
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
            # the quantization alone: against the same candidate's exact (own-dtype) continuation.
            # Against the oracle the bf16 candidate's own logit error (judged by model.continuation's
            # kernel_replacement contract) swamps it: KL mean 8.5e-4 on the H200 with no bug present.
            ref = np.asarray(runs["continuation"].logits)[:, P:]
            res.append(Comparison(path, "logits", run.logits.reshape(-1, ref.shape[-1]),
                                  ref.reshape(-1, ref.shape[-1]), kind="quantization_gate"))
    return res
