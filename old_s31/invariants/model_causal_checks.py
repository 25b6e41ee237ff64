"""Bitwise causality of the whole decoder (model.causal): its case, run function and check record,
beside invariants/model_checks.py (whose helpers it uses) to keep that module under 600 lines."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

from invariants.check import Check
from invariants.compare import Comparison
from invariants.model_checks import ModelCase, chunked_prefill, geometry_of, model_cases, model_cut, prompt, target_side
from invariants.target import Target
from oracle.config import Geometry


class CausalModelCase(NamedTuple):
    """A prompt batch through the whole decoder twice, the second time with the ids from `cut` on redrawn."""

    prompt: ModelCase
    cut: int


@st.composite
def causal_model_cases(draw, base: Geometry) -> CausalModelCase:
    case = draw(model_cases(base))
    return CausalModelCase(case, draw(st.integers(0, case.length - 1)))


def run_model_causal(case: CausalModelCase, cand: Target, base: Target) -> list:
    """Bitwise causality of the whole decoder: the logits before the cut of a (split) prefill must not
    change AT ALL when only the tokens from the cut on do (KDA, the DSA layers, MoE and mHC together)."""
    c, cut = case.prompt, case.cut
    g = geometry_of(c.base, c.layers)
    ids, mask = prompt(c, g)
    other = np.random.default_rng(c.seed + 1).integers(1, g.vocab_size, ids.shape)
    changed = ids.copy()
    changed[:, cut:] = np.where(mask[:, cut:] == 1, other[:, cut:], ids[:, cut:])
    side = target_side(cand, c)
    a = chunked_prefill(side, ids, mask, c.splits)
    b = chunked_prefill(side, changed, mask, c.splits)
    return [Comparison("chunked_prefill", "causal", b.logits[:, :cut], a.logits[:, :cut], kind="exact",
                       axes=("batch", "token", "vocab"))]


_TINY = Geometry.preset("tiny")

CHECKS = (
    Check("model.causal", "model", CausalModelCase, causal_model_cases, run_model_causal,
          "bitwise causality of the whole decoder: logits before a cut do not change when only later tokens do",
          # two tokens, the cut between them: a GEMM over the routed rows only goes from one row to two
          examples=(CausalModelCase(ModelCase("tiny", model_cut(_TINY), 1, 1, 2, (0,), (2,), 0, 0), 1),
                    CausalModelCase(ModelCase("tiny", model_cut(_TINY), 0, 2, 9, (0, 2), (5, 4), 0, 2), 6)),
          cpu_examples=1),
)
