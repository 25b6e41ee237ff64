"""The batch-invariance declaration (BATCH_INVARIANT) and the parts the batch and rerun checks are made
of: what our namespaces claim, how a bad claim is refused, that a claim (and only a claim) makes a
comparison exact, that a failure names the row that moved, the placement strategy, and the tie inputs
the rerun checks rely on."""
from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

from impl import mutants, registry
from invariants import batch_checks as bc
from invariants import batch_ffn_checks as bf
from invariants import rerun_checks as rc
from invariants.engine import run_one
from invariants.matrix import BY_NAME, case_of, case_to_json
from invariants.report import ContractBroken
from invariants.target import cpu_targets
from oracle import dsa as odsa
from oracle.config import Geometry
from strategies.sequences import Placement, placements, sequence_lengths

FIND = settings(max_examples=2000, database=None)
# reachability: the first example that satisfies the predicate, not shrunk (shrinking a drawn case with a
# geometry costs seconds and proves nothing about reaching it)
REACH = settings(max_examples=2000, database=None, phases=(Phase.generate,))
TINY = Geometry.preset("tiny")


# ------------------------------------------------------------------------ the declaration

OURS = {"triton": {"kda": ("chunked", "recurrent", "decode"), "mhc": ("coefficients", "write_back"),
                   "nvfp4": ("qdq_activation",)},
        "torch": {"kda": ("chunked", "recurrent"), "nvfp4": ("qdq_activation",)}}


@pytest.mark.parametrize("name", sorted(OURS))
def test_our_namespaces_claim_what_they_were_measured_to_hold(name):
    impl = registry.get(name)
    got = {m: registry.batch_invariant(name, getattr(impl, m), m) for m in registry.MECHANISMS}
    assert {m: f for m, f in got.items() if f} == OURS[name]


def _module_name(stem: str) -> str:
    """A module name no earlier test imported (each parameter writes its own candidate file)."""
    import uuid
    return f"{stem}_{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("claim, match", [
    ("chunked", "must be a tuple of function names"),
    (("chunked", 3), "must be a tuple of function names"),
    (("index",), r"names \['index'\], which its kda namespace does not provide"),
    (("recurrent",), r"names \['recurrent'\], which its kda namespace does not provide"),
], ids=["a string", "a non-name", "another mechanism's function", "a function it does not provide"])
def test_a_bad_claim_is_refused_when_the_candidate_is_loaded(claim, match, tmp_path, monkeypatch):
    name = _module_name("claims")
    (tmp_path / f"{name}.py").write_text(
        "import impl.kda as ik\n\n\nclass KDA:\n    chunked = staticmethod(ik.chunked)\n"
        f"    BATCH_INVARIANT = {claim!r}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(ValueError, match=match):
        registry.get(f"{name}:KDA")


@pytest.mark.parametrize("claim", [None, ("chunked",)])
def test_a_composed_namespace_answers_with_the_candidates_own_claim_never_ours(claim, tmp_path, monkeypatch):
    """A candidate bringing only chunked runs inside our kda namespace, which claims chunked: the claim
    read through the composition is the candidate's (none, or its own), so its code is never held to
    bit-equality on our word, nor let off it on its own."""
    line = "" if claim is None else f"    BATCH_INVARIANT = {claim!r}\n"
    name = _module_name("composed")
    (tmp_path / f"{name}.py").write_text(
        "import impl.kda as ik\n\n\nclass KDA:\n    chunked = staticmethod(ik.chunked)\n" + line)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    impl = registry.get(f"{name}:KDA")
    assert registry.claims_batch_invariance(impl.kda, "chunked") == (claim is not None)
    assert not registry.claims_batch_invariance(impl.kda, "decode")


def test_a_claim_makes_the_comparison_exact_and_without_it_the_bound_holds():
    """A reduction block picked from the token count changes a token's last bits only: caught where the
    namespace claims the function (exact), within the self_consistency bound where it does not."""
    m = mutants.get("mhc_reduction_split_by_tokens")
    cand, base = cpu_targets("triton")
    planted = cand._replace(impl=registry.get(f"mutant:{m.name}"))
    # ten tokens in the batch (past the mutant's 8), five alone: N·D = 64 is reduced in one block or two
    check, case = BY_NAME["mhc.batch"], bf.MHCBatchCase(4, 16, 1, (5, 5), 1, "boosted", 0)
    with pytest.raises(ContractBroken) as e:
        run_one(check, case, planted, base)
    # the message names the row of interest, the batch and the first element that moved in it
    bad = [v.detail for v in e.value.verdicts if not v.ok]
    assert any("row 1 of 2 (lengths (5, 5)): coefficients" in d and "elements differ; first at" in d
               for d in bad), bad
    unclaimed = type("Unclaimed", (m.cls,), {"BATCH_INVARIANT": ()})()
    verdicts = run_one(check, case, planted._replace(impl=planted.impl._replace(mhc=unclaimed)), base)
    assert {v.contract.kind for v in verdicts if v.contract.quantity == "batch"} == {"self_consistency"}


# ------------------------------------------------------------------------ the placement strategy


def test_placements_reach_the_row_last_among_companions_of_other_lengths():
    n = sequence_lengths(max_len=80)
    p = find(placements(n, companion_lengths=n), lambda p: p.at == len(p.lengths) - 1 >= 2
             and len(set(p.lengths)) == len(p.lengths), settings=REACH)
    assert p.at == len(p.lengths) - 1 and len(set(p.lengths)) == len(p.lengths) >= 3


def test_placements_shrink_to_one_companion_and_short_rows():
    assert find(placements(sequence_lengths()), lambda p: p.at > 0, settings=FIND) == Placement((1, 1), 1)
    assert find(placements(sequence_lengths()), lambda p: True, settings=FIND) == Placement((1, 1), 0)


@pytest.mark.parametrize("call, match", [
    (lambda: find(placements(5), bool), "row_lengths"),
    (lambda: find(placements(st.just(3), companion_lengths=3), bool), "companion_lengths"),
    (lambda: find(placements(st.just(3), max_rows=1), bool), "max_rows"),
], ids=["placements(5)", "placements(companion_lengths=3)", "placements(max_rows=1)"])
def test_bad_placement_arguments_are_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@settings(max_examples=10, database=None, deadline=None)
@given(st.sampled_from([bc.kda_batch_cases, bc.dsa_batch_cases, bc.mla_batch_cases, bf.moe_batch_cases,
                        bf.mhc_batch_cases, bf.nvfp4_batch_cases, rc.dsa_rerun_cases, rc.moe_rerun_cases])
       .flatmap(lambda strategy: strategy(TINY)))
def test_batch_and_rerun_cases_round_trip_through_json(case):
    assert case_of(case_to_json(case)) == case


@pytest.mark.parametrize("pair", bc.KDA_PAIRS, ids=lambda p: f"{p[0]}-{p[1]}")
def test_kda_batch_cases_reach_every_function_and_layout(pair):
    c = find(bc.kda_batch_cases(TINY), lambda c: (c.function, c.layout) == pair, settings=REACH)
    assert len(c.lengths) >= 2 and 0 <= c.at < len(c.lengths)


# ------------------------------------------------------------------------ tie inputs of the rerun checks


def test_the_pools_tie_family_makes_every_candidate_pool_score_alike():
    from invariants.dsa_checks import index_inputs
    case = BY_NAME["dsa.rerun"].examples[0]
    assert case.tie == "pools"
    w, a, q_lat, mask = index_inputs(case)
    a = rc._tie_pools(a, mask, case.geometry.kpool)
    sel = odsa.index(w, a, q_lat, odsa.index_rows(w, a, mask), mask)
    for s in range(sel.scores.shape[1]):
        cand = sel.scores[0, s][sel.candidate[0, s]]
        assert np.all(cand == cand[:1])
    # the cut falls inside the tie: more candidate pools than picks
    assert sel.candidate[0, -1].sum() > sel.k_sel


def test_the_router_rerun_pin_ties_selection_keys_exactly_at_the_cut():
    from invariants.moe_checks import moe_inputs
    from oracle import moe as omoe
    case = BY_NAME["moe.rerun"].examples[0]
    w, x = moe_inputs(case)
    r = omoe.route(w, x)
    keys = np.float32(r.scores) + np.float32(w.e_score_correction_bias)
    kth = np.sort(keys, -1)[:, ::-1][:, case.top_k - 1:case.top_k + 1]
    assert np.all(kth[:, 0] == kth[:, 1])


def test_a_run_twice_failure_that_does_not_replay_is_still_a_failure():
    """Hypothesis replays a failing case before reporting it, and two tied pools raced apart once may
    come out equal on the replay. A run-twice check has still seen two runs differ: it fails (with the
    case that showed it), it does not end in a flaky-test error."""
    from impl.baseline.dsa import TorchDSA
    from invariants.engine import run_check

    class OnceApart(TorchDSA):
        """index_rows' output moves on its very first call only."""

        calls = 0

        def index_rows(self, w, a, mask=None):
            rows = super().index_rows(w, a, mask)
            OnceApart.calls += 1
            return rows + 1.0 if OnceApart.calls == 1 else rows

    cand, base = cpu_targets("torch")
    r = run_check(BY_NAME["dsa.rerun"]._replace(examples=()), TINY,
                  cand._replace(impl=cand.impl._replace(dsa=OnceApart())), base, "ci", max_examples=2)
    assert r.status == "fail", (r.status, r.message)
    assert "dsa.index_rows.rerun [exact" in r.message and r.shrunk_case is not None
