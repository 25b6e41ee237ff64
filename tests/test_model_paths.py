"""The whole-decoder path check (invariants/model_checks.py, check model.paths).

- impl (Triton, CPU interpreter, float32) passes on a case that crosses every path: left padding that
  spans two prefill calls, one-token decode steps, serialize -> deserialize -> continue;
- each model mutant breaks the property it was planted for (and the per-mechanism checks cannot
  see it: every mechanism namespace of a model mutant is the torch baseline);
- a bug planted in the ORACLE breaks the oracle's own self-consistency (no impl mutant can).

`glmgate run --mechanism model` and the model.reference cross-check's NOT RUN: tests/test_framework_cli.py.
"""
from __future__ import annotations

import json

import pytest
import torch

from invariants.engine import run_check
from impl import mutants, registry
from invariants import model_checks as mc
from invariants.matrix import BY_NAME, evaluate
from invariants.target import Target
from oracle.config import Geometry
from invariants.matrix import case_of as case_from_json
from invariants.matrix import case_to_json

TINY = Geometry.preset("tiny")
CHECK = BY_NAME["model.paths"]
BASE = Target(registry.get("torch"), "cpu", torch.float32)
# the whole-decoder mutants of this file's checks (model.sharded's are tests/test_sharded.py's)
MODEL_MUTANTS = sorted(n for n, m in mutants.MUTANTS.items()
                       if m.mechanism == "model" and m.check in ("model.paths", "model.causal"))


def _case(batch=2, length=6, pad=(0, 3), splits=(2, 4), steps=2, model_seed=0, seed=1) -> mc.ModelCase:
    return mc.ModelCase("tiny", mc.model_cut(TINY), model_seed, batch, length, pad, splits, steps, seed)


def _broken(name, case) -> set:
    cand = Target(registry.get(f"mutant:{name}"), "cpu", torch.float32)
    return {f"{v.contract.path}.{v.contract.quantity}" for v in evaluate(CHECK, case, cand, BASE) if not v.ok}


def test_the_cut_keeps_every_layer_kind_and_the_shared_handoff():
    g = mc.geometry_of("tiny", mc.model_cut(TINY))
    assert mc.model_cut(TINY) == 5 and g.indexer_types[-1] == "shared" and g.indexer_types[-2] == "full"
    assert set(g.layer_types) == set(TINY.layer_types) and set(g.mlp_layer_types) == set(TINY.mlp_layer_types)


@pytest.mark.parametrize("splits, pad, legal", [((1, 2, 3), 2, (3, 3)), ((1, 1, 4), 3, (2, 4)),
                                                 ((5, 1), 6, (6,)), ((2, 1, 3), 2, (2, 1, 3)), ((1, 5), 0, (1, 5))])
def test_a_one_token_call_over_padding_is_merged_away(splits, pad, legal):
    """SPEC §3: a 1-token call's mask is all ones, so it cannot carry a pad."""
    assert mc.legal_splits(splits, pad) == legal


def test_a_case_survives_the_repro_json():
    case = _case()
    assert case_from_json(json.loads(json.dumps(case_to_json(case)))) == case


def test_the_check_compares_every_path_and_quantity():
    """What model.paths compares is a property of the check, not of the target: the torch baseline
    (no interpreter) shows it; tests/test_matrix.py runs the triton kernels on the same pinned case."""
    verdicts = evaluate(CHECK, _case(), BASE, BASE)
    bad = [v for v in verdicts if not v.ok]
    assert not bad, bad[0]
    paths = {v.contract.path for v in verdicts}
    assert {"chunked_prefill", "token_decode", "continuation", "continuation_bfloat16", "padded_row",
            "oracle_token_decode"} <= paths
    quantities = {v.contract.quantity for v in verdicts}
    assert quantities == {"logits", "kda_recurrent", "kda_conv", "dsa_latent", "index_rows", "pooled_keys",
                          "pool_flags", "valid_flags", "seq_len",
                          "selection", "expert_ids", "handoff", "quantization"}
    persisted = {v.contract.quantity for v in verdicts if v.contract.path == "continuation_bfloat16"}
    assert {"logits", "kda_recurrent", "selection", "expert_ids", "handoff", "quantization"} <= persisted


def test_the_baseline_passes_drawn_cases():
    r = run_check(CHECK, TINY, BASE, BASE, "ci", max_examples=15)
    assert r.status == "pass", r.message


@pytest.mark.parametrize("name, case, must_break, must_hold", [
    ("model_stale_shared_selection_in_decode", _case(pad=(0, 0)), {"token_decode.logits"},
     {"chunked_prefill.logits"}),
    ("model_restore_drops_conv_window", _case(pad=(0, 0)), {"continuation.kda_conv", "continuation.logits"},
     {"token_decode.logits", "chunked_prefill.logits"}),
    # its decode steps attend the pads: a selection outside the tie rule (the logits then agree with the
    # oracle forced to that selection: decision-conditioned, the wrong decision is what breaks)
    ("model_decode_forgets_padding", _case(), {"token_decode.valid_flags", "token_decode.selection"},
     {"chunked_prefill.logits", "padded_row.logits"}),
    ("model_mask_first_columns", _case(), {"chunked_prefill.logits", "padded_row.logits"},
     {"token_decode.valid_flags"}),
    # the bf16 format's own layout bug: the exact continuation is right, the persisted one is not
    ("model_restore_bf16_format_transposed", _case(pad=(0, 0)),
     {"continuation_bfloat16.quantization", "continuation_bfloat16.handoff", "continuation_bfloat16.logits"},
     {"continuation.logits", "continuation.handoff"}),
])
def test_each_model_mutant_breaks_the_path_it_was_planted_for(name, case, must_break, must_hold):
    broken = _broken(name, case)
    assert must_break <= broken, f"{name}: broke only {sorted(broken)}"
    assert not must_hold & broken, f"{name}: also broke {sorted(must_hold & broken)}"
    assert not any(b.startswith("oracle_") for b in broken), "an impl mutant cannot move the oracle"


def test_every_model_mutant_is_listed():
    assert MODEL_MUTANTS == ["model_decode_forgets_padding", "model_expert_gemm_over_routed_rows",
                             "model_mask_first_columns", "model_restore_bf16_format_transposed",
                             "model_restore_bf16_recurrent",
                             "model_restore_drops_conv_window", "model_restore_transposed_kda_state",
                             "model_stale_shared_selection_in_decode"]
    assert all(mutants.MUTANTS[n].check == ("model.causal" if n == "model_expert_gemm_over_routed_rows"
                                            else "model.paths") for n in MODEL_MUTANTS)


def test_a_bug_planted_in_the_oracle_breaks_its_self_consistency(monkeypatch):
    """The oracle's continuation forgets its KDA conv windows: only the oracle_* paths may notice."""
    from oracle import model as om
    from oracle.types import KDAState

    forward = om.forward

    def buggy(weights, ids, state=None, mask=None, **kw):
        if state is not None and state.seq_len:
            state = state.snapshot()
            state.layers = [KDAState(e.recurrent, 0 * e.conv) if isinstance(e, KDAState) else e for e in state.layers]
        return forward(weights, ids, state, mask, **kw)

    monkeypatch.setattr(om, "forward", buggy)
    broken = {f"{v.contract.path}.{v.contract.quantity}" for v in evaluate(CHECK, _case(pad=(0, 0)), BASE, BASE)
              if not v.ok}
    assert {"oracle_chunked_prefill.logits", "oracle_token_decode.kda_conv"} <= broken


def _call(sel_rows, exp_rows):
    """One forward call's log: a selection record [B, n, W] and an expert record [B·n, k]."""
    import numpy as np
    sel = np.array(sel_rows)
    return [("selection", sel), ("experts", np.array(exp_rows).reshape(-1, 2))]


def test_the_tokens_before_a_rows_first_flip_are_the_ones_the_quantization_gate_judges():
    from invariants.model_handoff import unflipped_tokens

    exact = _call([[[1, 2, -1], [3, 4, -1]], [[1, 2, -1], [3, 4, -1]]], [[0, 1], [2, 3], [0, 1], [2, 3]])
    same_sets = _call([[[2, 1, -1], [4, 3, -1]], [[1, 2, -1], [3, 4, -1]]], [[1, 0], [3, 2], [0, 1], [2, 3]])
    assert unflipped_tokens(exact, same_sets, 2, 2) == [2, 2]       # order and padding are not decisions
    row1_token0 = _call([[[1, 2, -1], [3, 4, -1]], [[1, 5, -1], [3, 4, -1]]], [[0, 1], [2, 3], [0, 1], [2, 3]])
    assert unflipped_tokens(exact, row1_token0, 2, 2) == [2, 0]
    expert_row0_token1 = _call([[[1, 2, -1], [3, 4, -1]], [[1, 2, -1], [3, 4, -1]]],
                               [[0, 1], [2, 5], [0, 1], [2, 3]])
    assert unflipped_tokens(exact, expert_row0_token1, 2, 2) == [1, 2]
    with pytest.raises(ValueError, match="same number of decisions"):
        unflipped_tokens(exact, exact[:1], 2, 2)


def test_a_decision_the_bf16_persisting_flips_is_judged_as_a_path_not_a_quantization():
    """The H200's and the CPU's false alarm: the 2^-8 perturbation of a bf16-persisted KDA state flips a
    DSA pool at a near-tie in row 1 (KL 8.6e-4 against the exact continuation, the gate's bound 1e-4).
    The flip is legal (tie-aware against the oracle), the row's token is judged against the oracle given
    it, and the gate judges the other row's token alone."""
    case = mc.ModelCase("tiny", 5, 1, 2, 21, (0, 3), (21,), 1, 11229)
    bf16 = Target(registry.get("torch"), "cpu", torch.bfloat16)
    verdicts = evaluate(CHECK, case, bf16, bf16)
    bad = [v for v in verdicts if not v.ok]
    assert not bad, bad[0]
    gate = [v for v in verdicts if v.contract.path == "continuation_bfloat16" and v.contract.quantity == "quantization"]
    assert len(gate) == 1 and gate[0].detail.startswith("1 of 2 continued tokens (the other 1 follow a decision flip")
    flips = [v for v in verdicts if v.contract.path == "continuation_bfloat16" and v.contract.quantity == "selection"]
    assert any("1 legal flips" in v.detail for v in flips)
