"""scripts/kda_diag_probe.py (issue 14 step 31): its variants are source edits of the shipped diagonal kernel, so a
kernel change can leave one that no longer applies (stop 41: `stores_first` broke when the kernel's `_gated_qk`
call took FTZ). Every variant must still build; on the interpreter the moved stores must keep ours' bits and
the ablations must change them (else the probe times something other than it says)."""
from __future__ import annotations

import importlib.util
import os

import torch

from impl import kda as ik

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("kda_diag_probe", os.path.join(ROOT, "scripts", "kda_diag_probe.py"))
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)

def _inputs():
    gen = torch.Generator().manual_seed(0)
    B, T, H, K, V = 1, 150, 2, 32, 32
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    return q, k, torch.randn(B, T, H, V, generator=gen), -3 * torch.rand(B, T, H, K, generator=gen), \
        torch.rand(B, T, H, generator=gen)


def test_every_variant_applies_to_the_shipped_kernel():
    for name in ["base", *probe.EDITS, *probe.CAPS, *probe.LAUNCH, *probe.COMBOS]:
        with probe.variant(name, {}):      # builds the edited kernel: a stale edit raises here
            pass


def test_the_moved_stores_keep_ours_bits_and_the_bare_ablation_does_not():
    """On the interpreter (which runs tl.exp, so ftz is not in it) one variant of each kind, run: the probe's
    bit-keeping change and its largest ablation (every one of the other ablations' edits is in it)."""
    x = _inputs()
    ours = ik.chunked_ex(*x, None, 64, None, True)[:3]
    for name, same in (("stores_first", True), ("bare", False)):
        with probe.variant(name, {}):
            got = ik.chunked_ex(*x, None, 64, None, True)[:3]
        assert all(torch.equal(a, b) for a, b in zip(got, ours)) == same, name


def test_the_probes_nan_last_launch_names_g_and_beta_as_ours():
    """nan_last (step 32): the same NaN report, from a mask gathered across the K tiles, stored after them."""
    x = _inputs()
    for what, want in (("g", [1, 0]), ("beta", [0, 1])):
        q, k, v, g, beta = (a.clone() for a in x)
        if what == "g":
            g[0, 127, 1, 20] = float("nan")
        else:
            beta[0, 149, 0] = float("nan")
        with probe.variant("nan_last", {}):
            info = ik.chunked_ex(q, k, v, g, beta, None, 64, None, True)[3]
        assert info.tolist() == want, what
