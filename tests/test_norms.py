"""Ours' three norms (impl.model.rmsnorm, impl.mla.rmsnorm, impl.kda.gated_rmsnorm: one launch each of
impl/kernels/norm.py since issue 14 step 14), on the interpreter, against the torch forms they replaced
(`*_torch`, the peer impl.candidates.norms_torch) and the float64 truth.

The property: the kernel is as accurate as the torch form. Both compute in float32 and differ only in
the order of the row's sum of squares, so against the exact result (float64 arithmetic on the same
float32 inputs) the kernel's worst relative error must stay within 2x the torch form's plus 2 units in
the last place. A wrong divisor (D + 1), a missing gate or a wrong weight is off by far more (the
planted edits below must fail it; the catalogue's norm_kernel mutants plant such edits for the checks). The
CUDA verdicts (bf16, MODE 1's rounding before the weight) come from the checks on the GPU.
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
import impl.norm as inorm
from impl import registry
from impl.mutants.catalogue import kernel_edited
from invariants.engine import run_check
from invariants.matrix import BY_NAME
from invariants.target import Target
from oracle.config import Geometry

U32 = 2.0 ** -24


def _exact(mode, x, w, eps, zg=None):
    """The norm in float64 from x's values (MODE 1 rounds the normalized row to x's dtype, as the spec does)."""
    u, w64 = x.double(), w.double()
    r = torch.rsqrt((u * u).mean(-1, keepdim=True) + eps)
    if mode == 0:
        return w64 * (u * r)
    if mode == 1:
        return (u * r).to(x.dtype).double() * w64
    return w64 * u * r * torch.sigmoid(zg.double())


FORMS = {0: (imodel.rmsnorm, imodel.rmsnorm_torch), 1: (imla.rmsnorm, imla.rmsnorm_torch),
         2: (lambda x, w, eps, zg: ik.gated_rmsnorm(x, zg, w, eps),
             lambda x, w, eps, zg: ik.gated_rmsnorm_torch(x, zg, w, eps))}


def _errors(mode, rows, D, scale, seed, device="cpu", dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x, w, zg = ((t * s).to(device, dtype) for t, s in ((torch.randn(rows, D, generator=g), scale),
                                                      (torch.randn(D, generator=g), 1.0),
                                                      (torch.randn(rows, D, generator=g), 3.0)))
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
    with kernel_edited(inorm, "norm_fwd_kernel", old, new):
        fused, torch_form = _errors(mode, 3, D, 1.0, 7)
    assert fused > 2 * torch_form + 2 * U32


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("rows, D", [(1, 4096), (7, 4096), (1, 512), (64, 128), (33, 2048)])
def test_each_norm_is_as_accurate_as_the_torch_form_in_bf16_on_cuda(mode, rows, D):
    # both round the float32 result to bf16 once: within 2x the torch form's error + one bf16 unit (2^-8)
    fused, torch_form = _errors(mode, rows, D, 1.0, rows * D + mode, "cuda", torch.bfloat16)
    assert fused <= 2 * torch_form + 2.0 ** -8, f"mode {mode} D={D}: kernel {fused:.3g} vs torch form {torch_form:.3g}"


def test_a_cpu_tensor_without_the_interpreter_takes_the_torch_form(monkeypatch):
    """A CPU tensor on a machine with a GPU (TRITON_INTERPRET unset): no kernel can run it, so the torch form."""
    monkeypatch.setattr(inorm, "interpreted", lambda: False)
    monkeypatch.setattr(inorm, "launch", None)                    # a launch would fail loudly
    x, w, zg = torch.randn(3, 16), torch.randn(16), torch.randn(3, 16)
    assert torch.equal(imodel.rmsnorm(x, w, 1e-6), imodel.rmsnorm_torch(x, w, 1e-6))
    assert torch.equal(imla.rmsnorm(x, w, 1e-6), imla.rmsnorm_torch(x, w, 1e-6))
    assert torch.equal(ik.gated_rmsnorm(x, zg, w, 1e-6), ik.gated_rmsnorm_torch(x, zg, w, 1e-6))


def test_the_plain_torch_baseline_keeps_the_torch_decoder_norm(monkeypatch):
    """The baseline ("torch", and the mutants built on it) is the contracts' low-precision reference: no kernel of
    ours runs inside it, its decoder norm included; ours' decoder launches the kernel."""
    launched = []
    real = inorm.launch
    monkeypatch.setattr(inorm, "launch", lambda *a, **k: launched.append(a[3]) or real(*a, **k))
    x, w = torch.randn(2, 3, 16), torch.randn(16)
    for name, launches in (("torch", []), ("mutant:model_stale_shared_selection_in_decode", []), ("triton", [0])):
        launched.clear()
        y = imodel.TorchDecoder(registry.get(name), "cpu", torch.float32)._rmsnorm(x, w, 1e-6)
        assert launched == launches, name
        if not launches:
            assert torch.equal(y, imodel.rmsnorm_torch(x, w, 1e-6))


def test_bad_input_is_refused():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match=r"weight: expected \[8\]"):
        imodel.rmsnorm(x, torch.ones(7), 1e-6)
    with pytest.raises(ValueError, match=r"zg: expected x's shape"):
        ik.gated_rmsnorm(x, torch.ones(2, 7), torch.ones(8), 1e-6)
    with pytest.raises(ValueError, match="expected a float dtype"):
        imodel.rmsnorm(torch.ones(2, 8, dtype=torch.int32), torch.ones(8), 1e-6)


def test_float64_and_empty_inputs_keep_their_dtype_and_shape():
    x = torch.randn(3, 16, dtype=torch.float64)
    y = imodel.rmsnorm(x, torch.ones(16), 1e-6)
    assert y.dtype == torch.float64 and np.allclose(y.numpy(), imodel.rmsnorm_torch(x, torch.ones(16), 1e-6).numpy(),
                                                    rtol=4 * 16 * U32, atol=0)
    assert imodel.rmsnorm(torch.empty(0, 16), torch.ones(16), 1e-6).shape == (0, 16)


def test_the_torch_forms_run_through_the_seams_and_pass_kda_sublayer():
    """impl.candidates.norms_torch, the layer replays' peer, is a candidate the gate can run."""
    impl = registry.get("impl.candidates.norms_torch:Candidate")
    assert sorted(impl.kda.provided) == ["gated_rmsnorm"] and sorted(impl.mla.provided) == ["rmsnorm"]
    cand = Target(impl, "cpu", torch.float32)
    base = Target(registry.get("torch"), "cpu", torch.float32)
    r = run_check(BY_NAME["kda.sublayer"]._replace(examples=()), Geometry.preset("tiny"), cand, base, "ci",
                  max_examples=2)
    assert r.status == "pass", r
