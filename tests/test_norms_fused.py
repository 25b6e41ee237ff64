"""impl.candidates.norms_fused (issue 14 step 14's candidate): each of the three norms in one launch of
impl/kernels/norm.py, on the interpreter, against the torch form it would replace and the float64 truth.

The property: the kernel is as accurate as the torch form. Both compute in float32 and differ only in
the order of the row's sum of squares, so against the exact result (float64 arithmetic on the same
float32 inputs) the kernel's worst relative error must stay within 2x the torch form's plus 2 units in
the last place. A wrong divisor (D + 1), a missing gate or a wrong weight is off by far more (the
planted edits below must fail it). The CUDA verdicts (bf16, MODE 1's rounding before the weight) come
from `glmgate gate` on the GPU (docs/optimization_log.md, step 14).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import impl.kda as ik
import impl.mla as imla
import impl.model as imodel
from impl import registry
from impl.candidates import norms_fused as nf
from impl.mutants.catalogue import kernel_edited
from invariants.engine import run_check
from invariants.matrix import BY_NAME
from invariants.target import Target
from oracle.config import Geometry

U32 = 2.0 ** -24


def _exact(mode, x, w, eps, zg=None):
    """The norm in float64 from the float32 inputs (MODE 1's cast to x's dtype is float32 here)."""
    u, w64 = x.double(), w.double()
    r = torch.rsqrt((u * u).mean(-1, keepdim=True) + eps)
    if mode == 0:
        return w64 * (u * r)
    if mode == 1:
        return (u * r).float().double() * w64
    return w64 * u * r * torch.sigmoid(zg.double())


FORMS = {0: (nf.rmsnorm, imodel.rmsnorm), 1: (nf.mla_rmsnorm, imla.rmsnorm),
         2: (lambda x, w, eps, zg: nf.gated_rmsnorm(x, zg, w, eps), lambda x, w, eps, zg: ik.gated_rmsnorm(x, zg, w, eps))}


def _errors(mode, rows, D, scale, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, D, generator=g) * scale
    w = torch.randn(D, generator=g)
    zg = torch.randn(rows, D, generator=g) * 3
    args = (x, w, 1e-6) + ((zg,) if mode == 2 else ())
    fused, torch_form = (f(*args) for f in FORMS[mode])
    exact = _exact(mode, x, w, 1e-6, zg)
    # relative to the row's largest |y| (an element near 0 has no meaningful relative error)
    ref = exact.abs().amax(-1, keepdim=True).clamp_min(1e-300)
    err = lambda y: float(((y.double() - exact).abs() / ref).max())   # noqa: E731
    return err(fused), err(torch_form)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.sampled_from([0, 1, 2]), st.integers(1, 5), st.sampled_from([1, 3, 8, 127, 128, 512, 4096]),
       st.sampled_from([1e-3, 1.0, 1e3]), st.integers(0, 2 ** 31 - 1))
def test_each_norm_is_as_accurate_as_the_torch_form(mode, rows, D, scale, seed):
    fused, torch_form = _errors(mode, rows, D, scale, seed)
    assert fused <= 2 * torch_form + 2 * U32, f"mode {mode} D={D}: kernel {fused:.3g} vs torch form {torch_form:.3g}"


@pytest.mark.parametrize("mode, D, old, new", [
    (0, 4096, "/ D + eps", "/ (D + 1) + eps"),                 # the mean over one element too many
    (2, 64, "* tl.sigmoid(b_g)", "* tl.sigmoid(b_g * 0.)"),       # the gate dropped (sigmoid(0) = 1/2)
    (0, 64, "b_y = b_w * (b_x * b_r)", "b_y = b_x * b_r"),        # the weight forgotten
])
def test_a_planted_kernel_edit_breaks_the_property(mode, D, old, new):
    with kernel_edited(nf, "norm_fwd_kernel", old, new):
        fused, torch_form = _errors(mode, 3, D, 1.0, 7)
    assert fused > 2 * torch_form + 2 * U32


def test_bad_input_is_refused():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match=r"weight: expected \[8\]"):
        nf.rmsnorm(x, torch.ones(7), 1e-6)
    with pytest.raises(ValueError, match=r"zg: expected x's shape"):
        nf.gated_rmsnorm(x, torch.ones(2, 7), torch.ones(8), 1e-6)
    with pytest.raises(ValueError, match="expected a float dtype"):
        nf.rmsnorm(torch.ones(2, 8, dtype=torch.int32), torch.ones(8), 1e-6)


def test_float64_and_empty_inputs_keep_their_dtype_and_shape():
    x = torch.randn(3, 16, dtype=torch.float64)
    y = nf.rmsnorm(x, torch.ones(16), 1e-6)
    assert y.dtype == torch.float64 and np.allclose(y.numpy(), imodel.rmsnorm(x, torch.ones(16), 1e-6).numpy(),
                                                    rtol=4 * 16 * U32, atol=0)
    assert nf.rmsnorm(torch.empty(0, 16), torch.ones(16), 1e-6).shape == (0, 16)


def test_the_candidate_runs_through_the_seams_and_passes_kda_sublayer():
    impl = registry.get("impl.candidates.norms_fused:Candidate")
    assert sorted(impl.kda.provided) == ["gated_rmsnorm"] and sorted(impl.mla.provided) == ["rmsnorm"]
    cand = Target(impl, "cpu", torch.float32)
    base = Target(registry.get("torch"), "cpu", torch.float32)
    r = run_check(BY_NAME["kda.sublayer"]._replace(examples=()), Geometry.preset("tiny"), cand, base, "ci",
                  max_examples=2)
    assert r.status == "pass", r
