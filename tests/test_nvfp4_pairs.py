"""The split NVFP4 tiles' two-codes-per-instruction dequantization (PAIRS, impl/kernels/moe.py
`_E2M1X2_ASM` / `_nvfp4_halves_x2`; issue 14 step 11, docs/optimization_log.md): inline PTX that turns 4
packed bytes into 8 bf16 values with 32-bit operations on two 16-bit lanes at once.

The contract: every code's bf16 pattern is e2m1 · 2^-126 exactly (the e = 0 codes on bf16's subnormals),
and its product with the scale · 2^119 is e2m1 · scale · 2^-7 exactly, for every code and finite scale
(pure arithmetic, checked on any machine through `twin`, the PTX's steps in integer arithmetic); compiled,
the kernel dequantizes every code under every scale bit-exactly and its experts hold the oracle's contract
(CUDA only: the interpreter cannot run inline PTX, and asking for it there is refused).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import impl
from impl import moe as imoe
from impl import nvfp4 as inv
from tests.test_nvfp4_split import _every_code_and_scale, _finite_scales, _value

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
compiled_cuda = pytest.mark.skipif(DEVICE != "cuda" or impl.interpreted(),
                                   reason="inline PTX: a compiled kernel on a CUDA GPU")
MASK32 = 0xFFFFFFFF


def twin(word: torch.Tensor):
    """_E2M1X2_ASM's steps on int64 lanes: uint32 words of 4 packed bytes -> ((lo01, lo23), (hi01, hi23)),
    each a word of two bf16 bit patterns (element 2i in the low half), before the fma by the scale."""
    w = word.to(torch.int64) & MASK32
    byte = [(w >> (8 * i)) & 0xFF for i in range(4)]
    t0, t1 = byte[0] | (byte[1] << 16), byte[2] | (byte[3] << 16)        # prmt 0x4140, 0x4342

    def nibble(t, mag_shift, sign_shift):
        a = (t << mag_shift) & MASK32                                          # shl a
        b = ((t << sign_shift) & MASK32) & 0x80008000                          # shl b; and
        return (a & 0x01C001C0) | b                                            # lop3 0xEA = (a & b) | c
    return (nibble(t0, 6, 12), nibble(t1, 6, 12)), (nibble(t0, 2, 8), nibble(t1, 2, 8))


def _halves(words: torch.Tensor) -> torch.Tensor:
    """[n] words of two bf16 patterns -> [n, 2] float64 values (element 0 = the low half)."""
    lanes = torch.stack([words & 0xFFFF, (words >> 16) & 0xFFFF], -1)
    return lanes.to(torch.int32).to(torch.int16).view(torch.bfloat16).to(torch.float64)


def test_every_code_becomes_its_e2m1_value_times_2_to_minus_126():
    """All 256 bytes in each of the 4 byte positions: the low nibble's pattern is e2m1(low) · 2^-126 in the
    byte's own lane, the high nibble's e2m1(high) · 2^-126, signs (and -0) included."""
    v = torch.arange(256, dtype=torch.int64)
    for pos in range(4):
        words = v << (8 * pos)
        (lo01, lo23), (hi01, hi23) = twin(words)
        lo = torch.cat([_halves(lo01), _halves(lo23)], -1)[:, pos]
        hi = torch.cat([_halves(hi01), _halves(hi23)], -1)[:, pos]
        assert lo.equal(torch.from_numpy(_value(v.numpy() & 15)) * 2.0 ** -126), pos
        assert hi.equal(torch.from_numpy(_value(v.numpy() >> 4)) * 2.0 ** -126), pos
        assert torch.signbit(lo).equal(torch.from_numpy((v.numpy() & 8) > 0)), pos
    # the other lanes of the word stay 0 when only one byte is set
    (lo01, _), _ = twin(torch.tensor([0xFF]))
    assert int(lo01[0]) >> 16 == 0


def test_the_scaled_product_is_exact_in_bf16():
    """Every code x every finite fp8 scale: scale · 2^119 is a finite bf16 (exact), and the pattern times it
    is e2m1 · scale · 2^-7, a normal bf16 or zero, so fma.rn.bf16x2 (with -0 added) returns it exactly."""
    s = _finite_scales().to(torch.float64)
    s119 = (s * 2.0 ** 119).to(torch.bfloat16)
    assert s119.to(torch.float64).equal(s * 2.0 ** 119) and bool(torch.isfinite(s119).all())
    codes = torch.arange(16)
    (lo01, _), _ = twin(codes)
    pat = _halves(lo01)[:, 0]                                                  # [16] e2m1 · 2^-126
    prod = pat[:, None] * s119.to(torch.float64)[None, :]
    want = torch.from_numpy(_value(codes.numpy()))[:, None] * s[None, :] * 2.0 ** -7
    assert prod.equal(want)
    assert prod.to(torch.bfloat16).to(torch.float64).equal(want)              # representable: rounding is exact
    nz = want[want != 0].abs()
    assert float(nz.min()) == 2.0 ** -17 >= 2.0 ** -126 and float(nz.max()) == 6 * 448 * 2.0 ** -7


def _tiny():
    """(E, D, I, NVFP4 experts, x [3, D], ids, weights): 2 experts, 3 tokens all on expert 0, on the CPU."""
    E, D, I = 2, 64, 32
    nv = inv.quantize_experts(torch.randn(E, 2 * I, D), torch.randn(E, D, I))
    return E, D, I, nv, torch.randn(3, D), torch.zeros(3, 1, dtype=torch.int64), torch.ones(3, 1)


def test_asking_for_pairs_where_it_cannot_run_is_refused():
    E, D, I, nv, x, ids, wts = _tiny()
    with pytest.raises(ValueError, match="inline PTX"):
        imoe._grouped(x, ids, wts, E, I, nv=nv, pairs=True)                  # float32 on the CPU
    with pytest.raises(ValueError, match="split NVFP4 tiles"):
        imoe._grouped(x, ids, wts, E, I, nv=nv, pairs=True, split=False)
    assert not imoe.pairs_possible(torch.float32, "cpu")


@compiled_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("swizzled", [False, True], ids=["linear", "swizzled"])
def test_the_compiled_kernel_dequantizes_every_code_and_scale_bit_exactly(swizzled):
    """moe_down_fwd_kernel (PAIRS) with h = the identity: out[p, n] is the dequantized W[n, p] itself."""
    from impl.kernels.moe import moe_down_fwd_kernel
    D, K = 32, 128
    packed, scale, want = _every_code_and_scale(D, K)
    if swizzled:
        scale = inv.swizzle_scales(scale[0])[None]
    dev = dict(device="cuda")
    h = torch.eye(K, dtype=torch.bfloat16, **dev)
    out = torch.full((K, D), float("nan"), dtype=torch.float32, **dev)
    P, BM, BN, BK = K, 16, 32, 128
    moe_down_fwd_kernel[(P // BM, D // BN)](
        h, None, packed.cuda(), scale.cuda(), torch.ones(1, **dev), None,
        torch.arange(P, **dev), torch.zeros(P // BM, dtype=torch.int64, **dev), torch.ones(P, **dev), out, P,
        D=D, I=K, BM=BM, BN=BN, BK=BK, NVFP4=True, W4A4=False, DOT=imoe._DOT[torch.bfloat16], PRECISION="tf32",
        SWIZZLED=swizzled, SPLIT=True, PAIRS=True, num_warps=4)
    got = out.T.double().cpu().numpy()
    bad = np.argwhere(got != want)
    assert not len(bad), f"{len(bad)} elements differ, first {tuple(bad[0])}: {got[tuple(bad[0])]} vs {want[tuple(bad[0])]}"


def _experts_both(swizzled: bool, device: str, work: torch.dtype, pairs: bool):
    """(ours with the given dequantization, ours with the fp16 one, the float64 oracle's) on _layer(11)."""
    from oracle import moe as omoe
    from oracle import nvfp4 as onv
    from oracle.types import Routing
    from tests.test_nvfp4_split import _layer
    w, x, r = _layer(11)
    nv = onv.quantize_experts(w.gate_up_proj, w.down_proj)
    want = omoe.experts(w, x, r, nvfp4=nv)
    nvt = inv.experts_to(onv.swizzle_experts(nv) if swizzled else nv, device)
    to = lambda a: None if a is None else torch.as_tensor(np.asarray(a, dtype=np.float64)).to(device, work)
    rt = Routing(torch.as_tensor(r.expert_ids).to(device), *(to(a).float() for a in r[1:]))
    args = (w.map(to), to(x), rt)
    got = imoe.experts_with(*args, nvt, False, split=True, pairs=pairs)
    fp16 = imoe.experts_with(*args, nvt, False, split=True, pairs=False)
    return got.double().cpu().numpy(), fp16.double().cpu().numpy(), want


@compiled_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("swizzled", [False, True], ids=["linear", "swizzled"])
def test_pairs_experts_match_the_oracle_and_the_fp16_form(swizzled):
    """Gate/up global scales up to 10x apart: PAIRS and the fp16 form dequantize to the same bf16 weights, so
    the outputs agree to bf16 rounding of the summation order; both hold nvfp4's experts contract (bf16)
    against the float64 oracle."""
    from invariants.contracts import assert_contract
    got, fp16, want = _experts_both(swizzled, "cuda", torch.bfloat16, True)
    assert_contract("nvfp4", "experts", "output", "bench_gate", "bfloat16", got, want, what="PAIRS")
    assert_contract("nvfp4", "experts", "output", "bench_gate", "bfloat16", fp16, want, what="fp16 form")
    assert np.abs(got - fp16).max() <= 1e-2 * np.abs(fp16).max()


def test_a_tile_override_may_name_its_pipeline_stages():
    """tiles=(BM, BN, BK, warps, stages) (the bench's --sweep): the same result as Triton's default stages;
    a stage count below 1 or a sixth field is refused."""
    E, D, I, nv, x, ids, wts = _tiny()
    tile = (16, 16, 32, 4) if impl.interpreted() or DEVICE == "cpu" else (16, 32, 128, 4)
    assert torch.equal(imoe._grouped(x, ids, wts, E, I, nv=nv, tiles=tile),
                       imoe._grouped(x, ids, wts, E, I, nv=nv, tiles=tile + (2,)))
    for bad in (tile + (0,), tile + (2, 2)):
        with pytest.raises(ValueError, match="num_stages"):
            imoe._grouped(x, ids, wts, E, I, nv=nv, tiles=bad)


def test_the_module_switch_speaks_of_split_nvfp4_tiles_only(monkeypatch):
    """NVFP4_PAIRS = True forces PAIRS on split NVFP4 tiles (refused where it cannot run, as pairs=True),
    never on dense weights or interleaved tiles."""
    E, D, I, nv, x, ids, wts = _tiny()
    dense = (torch.randn(E, 2 * I, D), torch.randn(E, D, I))
    want_dense = imoe._grouped(x, ids, wts, E, I, dense=dense)
    want_inter = imoe._grouped(x, ids, wts, E, I, nv=nv, split=False)
    monkeypatch.setattr(imoe, "NVFP4_PAIRS", True)
    assert torch.equal(imoe._grouped(x, ids, wts, E, I, dense=dense), want_dense)
    assert torch.equal(imoe._grouped(x, ids, wts, E, I, nv=nv, split=False), want_inter)
    if not imoe.pairs_possible(torch.float32, "cpu"):
        with pytest.raises(ValueError, match="inline PTX"):
            imoe._grouped(x, ids, wts, E, I, nv=nv, split=True)
