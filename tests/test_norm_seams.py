"""The norms are seams (impl.registry.SEAMS): a candidate may bring its own KDA gated norm, MLA q / kv norm
or decoder norm, and our compositions run it (kda.sublayer, mla.project, TorchDecoder._rmsnorm), so a
fused norm kernel is gated like any other kernel (docs/optimization_log.md, step 14 planned).

An unchanged candidate (our torch forms) passes where its norm runs; one with a planted bug in one norm
fails the checks that reach that norm.
"""
from __future__ import annotations

import pytest
import torch

import impl.kda as ik
import impl.mla as imla
import impl.model as imodel
from impl import registry
from impl.compose import Composed
from invariants.engine import run_check
from invariants.matrix import BY_NAME
from invariants.target import Target
from oracle.config import Geometry

TINY = Geometry.preset("tiny")


class _Kda:
    gated_rmsnorm = staticmethod(ik.gated_rmsnorm)


class _Mla:
    rmsnorm = staticmethod(imla.rmsnorm)


class _Model:
    rmsnorm = staticmethod(imodel.rmsnorm)


class OurNorms:
    """The three norms, ours unchanged: everything else from our Triton implementation."""
    kda, mla, model = _Kda, _Mla, _Model


class _GateDropped:
    @staticmethod
    def gated_rmsnorm(o, zg, weight, eps):
        return ik.gated_rmsnorm(o, torch.full_like(zg, 30.0), weight, eps)      # sigmoid(zg) -> 1


class KdaNormWithoutGate:
    """The KDA output norm forgets the gate sigmoid(zg)."""
    kda = _GateDropped


class _LatentUnweighted:
    @staticmethod
    def rmsnorm(x, weight, eps):
        return imla.rmsnorm(x, torch.ones_like(weight), eps)


class MlaNormWithoutWeight:
    """The MLA q / kv norm forgets its weight."""
    mla = _LatentUnweighted


class _DecoderFourthRoot:
    @staticmethod
    def rmsnorm(x, w, eps):
        u = x.float()
        # the variance's square root taken twice (a fourth root): every norm's scale off
        y = u * torch.rsqrt(torch.sqrt(torch.mean(u * u, dim=-1, keepdim=True) + eps))
        return (w.float() * y).to(x.dtype)


class DecoderNormFourthRoot:
    """The decoder's RMSNorm divides by the fourth root of the mean square."""
    model = _DecoderFourthRoot


def _run(name: str, check: str, n: int = 2, shrink_seconds: float = 60.0):
    cand = Target(registry.get(f"test_norm_seams:{name}"), "cpu", torch.float32)
    base = Target(registry.get("torch"), "cpu", torch.float32)
    return run_check(BY_NAME[check]._replace(examples=()), TINY, cand, base, "ci", max_examples=n,
                     shrink_seconds=shrink_seconds)


def test_a_candidate_with_only_norms_is_composed_and_says_what_came_from_where():
    impl = registry.get("test_norm_seams:OurNorms")
    assert isinstance(impl.kda, Composed) and sorted(impl.kda.provided) == ["gated_rmsnorm"]
    assert impl.kda.origin("sublayer") == "triton composing the candidate's gated_rmsnorm"
    assert impl.mla.origin("project") == "triton composing the candidate's rmsnorm"
    assert impl.model.rmsnorm is _Model.rmsnorm and impl.model.forward is imodel.forward
    # ours: no model namespace, the decoder's own norm
    assert registry.get("triton").model is None


@pytest.mark.parametrize("check", ["kda.sublayer", "model.paths"])
def test_our_norms_as_a_candidate_pass(check):
    # one drawn decoder reaches all three norms (~4 s on the interpreter; 2 before stop 41, CI's budget); mla.paths
    # (12 s) reaches only MLA's, which model.paths covers (stop 48, CI's budget)
    r = _run("OurNorms", check, n=1 if check == "model.paths" else 2)
    assert r.status == "pass", r


@pytest.mark.parametrize("name, check", [("KdaNormWithoutGate", "kda.sublayer"),
                                         ("MlaNormWithoutWeight", "mla.paths"),
                                         ("DecoderNormFourthRoot", "model.paths")])
def test_a_norm_with_a_planted_bug_fails_the_checks_that_reach_it(name, check):
    # the verdict, not the shrunk case, is what this test holds: no shrinking (a decoder example is seconds)
    r = _run(name, check, shrink_seconds=0.0)
    assert r.status == "fail", r
