"""A candidate that provides some of a mechanism's functions runs inside our compositions
(impl/compose.py), and coverage tells what of it ran (invariants/coverage.py).

The candidates here wrap our own Triton `chunked`: one unchanged (must pass every path it reaches),
one with a planted tail bug (must fail every path that uses chunked: the sublayer, the paths, packing,
the whole decoder), never only its own unit check.
"""
from __future__ import annotations

import pytest
import torch

import impl.kda as ik
from impl import registry
from impl.compose import Composed, compose, provides
from invariants.engine import run_check
from invariants.matrix import BY_NAME
from invariants.target import Target
from oracle.config import Geometry

TINY = Geometry.preset("tiny")


class OnlyChunked:
    """Our chunked, unchanged: the rest of kda comes from the fallback."""

    @staticmethod
    def chunked(*args, **kwargs):
        return ik.chunked(*args, **kwargs)


class TailDropped:
    """A chunked prefill that zeroes the last token's output."""

    @staticmethod
    def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        o, s, b = ik.chunked(q, k, v, g, beta, state, chunk, cu_seqlens, boundary_states)
        o = o.clone()
        o[:, -1] = 0
        return o, s, b


class Nothing:
    """A kda namespace with none of the kda functions (a typo, a wrong object)."""


def _run(name: str, check: str, n: int = 2, pinned: bool = True, shrink_seconds: float = 60.0):
    """`pinned=False` leaves the record's pinned examples out (model.paths' pin costs ~24 s on the
    interpreter, its first drawn example ~5 s: either reaches every function these tests watch). A test
    that holds only the verdict of a failure shrinks nothing (`shrink_seconds=0`: a decoder example is
    seconds, and shrinking one takes a minute)."""
    cand = Target(registry.get(f"test_compose:{name}"), "cpu", torch.float32)
    base = Target(registry.get("torch"), "cpu", torch.float32)
    check = BY_NAME[check] if pinned else BY_NAME[check]._replace(examples=())
    if pinned and check.name == "kda.chunked":
        # what these tests hold (composition, coverage, a declared missing output) shows on any case: the packed
        # pin (documents with an empty one, a given state) and the head dim 32 one (CI's budget, stop 41)
        check = check._replace(examples=check.examples[2:4])
    return run_check(check, TINY, cand, base, "ci", max_examples=n, shrink_seconds=shrink_seconds)


def test_a_partial_namespace_is_completed_from_triton_and_says_what_came_from_where():
    ns = registry.get("test_compose:OnlyChunked").kda
    assert isinstance(ns, Composed) and sorted(ns.provided) == ["chunked"]
    assert ns.decode is ik.decode and ns.recurrent is ik.recurrent
    assert ns.origin("chunked") == "candidate" and ns.origin("decode") == "triton"
    assert ns.origin("sublayer") == "triton composing the candidate's chunked"
    # a mechanism the candidate lacks is the fallback's, for the decoder; its own checks do not run
    mla = registry.get("test_compose:OnlyChunked").mla
    assert isinstance(mla, Composed) and not provides(mla) and provides(ns)


def test_a_complete_namespace_is_used_as_it_is_and_an_empty_one_is_refused():
    assert compose("kda", ik, registry.FUNCTIONS["kda"]) is ik
    with pytest.raises(ValueError, match=r"provides none of \['recurrent', 'chunked', 'decode', 'sublayer', 'checkpoint'\]"):
        registry.get("test_compose:Nothing")


@pytest.mark.parametrize("check", ["kda.chunked", "kda.sublayer", "kda.packed"])
def test_an_unchanged_partial_candidate_passes_every_path_it_reaches_and_is_covered_there(check):
    r = _run("OnlyChunked", check)
    assert r.status == "pass" and r.covered == ("kda.chunked",), r


def test_a_check_that_only_reaches_the_fallback_is_not_covered():
    r = _run("OnlyChunked", "kda.decode")
    assert r.status == "not covered" and r.covered == (), r


@pytest.mark.parametrize("check", ["kda.chunked", "kda.sublayer", "kda.packed"])
def test_a_bug_in_the_one_provided_function_fails_every_path_that_uses_it(check):
    r = _run("TailDropped", check, n=4)
    assert r.status == "fail" and not r.crashed and "kda.chunked" in r.covered, r


def test_the_bug_reaches_the_whole_decoder():
    r = _run("TailDropped", "model.paths", n=1, pinned=False, shrink_seconds=0.0)
    assert r.status == "fail" and r.covered == ("kda.chunked",), r


class NoBoundaries:
    """A chunked prefill that computes no boundary states, and says so."""

    NOT_PROVIDED = ("chunked.boundary_states",)

    @staticmethod
    def chunked(q, k, v, g, beta, state=None, chunk=64, cu_seqlens=None, boundary_states=True):
        o, s, _ = ik.chunked(q, k, v, g, beta, state, chunk, cu_seqlens, False)
        return o, s, None


class SilentlyNoBoundaries:
    """The same, without declaring it."""

    chunked = NoBoundaries.chunked


class NoBoundariesTailDropped(NoBoundaries):
    """Declares boundary states not provided, and zeroes the last token's output: still judged there."""

    @staticmethod
    def chunked(*args, **kwargs):
        o, s, b = NoBoundaries.chunked(*args, **kwargs)
        o = o.clone()
        o[:, -1] = 0
        return o, s, b


class NotOptional:
    NOT_PROVIDED = ("chunked.final_state",)
    chunked = OnlyChunked.chunked


def test_a_declared_missing_output_is_not_covered_and_the_rest_is_judged():
    impl = registry.get("test_compose:NoBoundaries")
    assert impl.not_provided == frozenset({"kda.chunked.boundary_states"})
    r = _run("NoBoundaries", "kda.chunked")
    assert r.status == "pass" and r.not_provided == ("kda.chunked.boundary_states",), r
    # the output and the final state are still judged: a bug there fails
    bad = _run("NoBoundariesTailDropped", "kda.chunked", n=4)
    assert bad.status == "fail" and "chunked.output" in bad.message, bad


def test_an_undeclared_missing_output_fails_at_the_first_example_saying_how_to_declare_it():
    r = _run("SilentlyNoBoundaries", "kda.chunked", n=4)
    assert r.status == "fail" and r.examples == 1, r
    assert "returned None for kda.chunked.boundary_states" in r.message and "NOT_PROVIDED" in r.message, r


def test_only_optional_outputs_may_be_declared_not_provided():
    with pytest.raises(ValueError, match=r"not optional outputs; optional kda outputs: chunked.boundary_states"):
        registry.get("test_compose:NotOptional")


class OnlyCoefficients:
    """Our mHC coefficients, unchanged: the decoder must call them, not our fused kernel."""

    class mhc:
        @staticmethod
        def coefficients(w, X):
            import impl.mhc as imhc
            return imhc.coefficients(w, X)


def test_a_candidates_coefficients_reach_the_decoder_instead_of_our_fused_kernel():
    ns = registry.get("test_compose:OnlyCoefficients").mhc
    assert not hasattr(ns, "fused_coefficients_collapse")
    r = _run("OnlyCoefficients", "model.paths", n=1, pinned=False)
    assert r.status == "pass" and r.covered == ("mhc.coefficients",), r


class OnlyIndexer:
    """Our indexer, unchanged, as the only thing a candidate brings: our MLA sublayer must call it."""

    class dsa:
        @staticmethod
        def index_rows(*args, **kwargs):
            import impl.dsa as idsa
            return idsa.index_rows(*args, **kwargs)

        @staticmethod
        def index(*args, **kwargs):
            import impl.dsa as idsa
            return idsa.index(*args, **kwargs)


class IndexerRowsZeroed(OnlyIndexer):
    """An indexer whose cached rows of the last token are zero: the whole MLA path must see it."""

    class dsa(OnlyIndexer.dsa):
        @staticmethod
        def index_rows(*args, **kwargs):
            rows = OnlyIndexer.dsa.index_rows(*args, **kwargs).clone()
            rows[:, -1] = 0
            return rows


def test_a_candidates_indexer_is_reached_through_our_mla_sublayer():
    impl = registry.get("test_compose:OnlyIndexer")
    assert impl.mla.dsa is impl.dsa is OnlyIndexer.dsa          # complete: used as it is
    r = _run("OnlyIndexer", "mla.paths", n=1)
    assert r.status == "pass" and r.covered == ("dsa.index", "dsa.index_rows"), r
    bad = _run("IndexerRowsZeroed", "mla.paths", n=2)
    assert bad.status == "fail" and "dsa.index_rows" in bad.covered, bad


class OnlyNVFP4:
    """Our NVFP4 primitives, as the only thing a candidate brings (no moe): the quantization gate must
    run them, not our fused MoE kernel that never calls them."""

    class nvfp4:
        @staticmethod
        def quantize(*args, **kwargs):
            import impl.nvfp4 as inv
            return inv.quantize(*args, **kwargs)

        @staticmethod
        def dequantize(*args, **kwargs):
            import impl.nvfp4 as inv
            return inv.dequantize(*args, **kwargs)


def test_an_nvfp4_only_candidate_is_run_by_the_quantization_gate():
    r = _run("OnlyNVFP4", "nvfp4.gate", n=1)
    assert r.status == "pass" and "nvfp4.dequantize" in r.covered, r
