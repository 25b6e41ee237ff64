"""The split NVFP4 weight tiles of the MoE kernels (SPLIT, impl/kernels/moe.py `_nvfp4_halves`; issue 14
step 1, docs/optimization_log.md): even and odd columns dequantized as two tiles, e2m1 · 2^-14 times the
fp8 block scale in fp16, 2^14 folded into the epilogue.

The contract: the fp16 product is exact for every code and every finite scale, and so is its conversion
to bf16 (pure arithmetic, any machine); the kernel dequantizes every code under every scale bit-exactly
(on CUDA too: this file runs there, where the fp16 product meets the hardware's subnormal handling); the
split kernels agree with the oracle and with the interleaved ones (W4A16, W4A4, linear and swizzled
scales, gate/up global scales apart); the candidate built on them passes the gate.
"""
from __future__ import annotations


import numpy as np
import pytest
import torch

import impl
from impl import moe as imoe
from impl import nvfp4 as inv
from impl.kernels.moe import moe_down_fwd_kernel

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
interpreter_only = pytest.mark.skipif(not impl.interpreted(), reason="float32 CPU comparisons; CUDA: the gate")


def _value(code) -> np.ndarray:
    code = np.asarray(code)
    return np.where(code & 8, -1.0, 1.0) * E2M1[code & 7]


def _finite_scales() -> torch.Tensor:
    """The 254 finite float8_e4m3fn values (every byte but the two NaNs, 0x7F and 0xFF)."""
    b = torch.tensor([v for v in range(256) if v & 0x7F != 0x7F], dtype=torch.uint8)
    return b.view(torch.float8_e4m3fn)


def _pattern(byte: torch.Tensor, high: bool) -> torch.Tensor:
    """The kernel's fp16 bit pattern of one nibble, cut from the byte in place (value · 2^-14)."""
    b = byte.to(torch.int32)
    bits = ((b << 8) & 0x8000) | ((b << 5) & 0xE00) if high else ((b << 12) & 0x8000) | ((b << 9) & 0xE00)
    return bits.to(torch.int16).view(torch.float16)


def test_e2m1_times_fp8_scale_is_exact_in_fp16_and_in_bf16():
    """Every code in either nibble x every finite scale: the fp16 product (e2m1 · 2^-14) · s equals the
    float64 product, and so does its bf16 conversion; the range is [2^-24, 6 · 448 · 2^-14]."""
    codes = torch.arange(16, dtype=torch.int32)
    s = _finite_scales()
    s64 = s.to(torch.float64)
    assert s.to(torch.float16).to(torch.float64).equal(s64)                # fp8 -> fp16 is exact
    want = torch.from_numpy(_value(codes.numpy()))[:, None] * 2.0 ** -14 * s64[None, :]
    for high in (False, True):
        byte = (codes << 4) if high else codes
        v = _pattern(byte, high)
        assert v.to(torch.float64).equal(torch.from_numpy(_value(codes.numpy())) * 2.0 ** -14), high
        prod = v[:, None] * s.to(torch.float16)[None, :]                   # in fp16, as the kernel multiplies
        assert prod.dtype == torch.float16
        assert prod.to(torch.float64).equal(want), high
        assert prod.to(torch.bfloat16).to(torch.float64).equal(want), high
        assert prod.to(torch.float32).to(torch.float64).equal(want), high
    nonzero = want[want != 0].abs()
    assert float(nonzero.min()) == 2.0 ** -24 and float(nonzero.max()) == 6 * 448 * 2.0 ** -14 < 65504


def _every_code_and_scale(rows: int = 32, K: int = 128):
    """One expert's NVFP4 down weight [rows, K] holding every code in both nibbles of every block, and every
    finite scale byte (NaN bytes replaced by 1.0): packed [1, rows, K/2], scales [1, rows, K/16], values."""
    r, blk = np.meshgrid(np.arange(rows), np.arange(K // 16), indexing="ij")
    sb = ((r * (K // 16) + blk) * 7 % 256).astype(np.uint8)     # rows · K/16 = 256 blocks, 7 odd: every byte once
    sb[(sb & 0x7F) == 0x7F] = 0x38                                           # 0x38 = 1.0
    assert len(np.unique(sb)) == 254
    codes = (np.arange(16)[None, None, :] + r[..., None] + 3 * blk[..., None]) % 16   # a permutation per block
    codes = codes.reshape(rows, K)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    scale = torch.from_numpy(sb).view(torch.float8_e4m3fn)
    values = _value(codes) * np.repeat(scale.to(torch.float64).numpy(), 16, axis=1)
    return torch.from_numpy(packed)[None], scale[None], values


@pytest.mark.parametrize("swizzled", [False, True], ids=["linear", "swizzled"])
@pytest.mark.parametrize("split", [False, True], ids=["interleaved", "split"])
def test_the_kernel_dequantizes_every_code_and_scale_bit_exactly(split, swizzled):
    """moe_down_fwd_kernel with h = the identity (pair p's row is e_p, weight 1, global scale 1): out[p, n]
    is the dequantized W[n, p] itself, each dot summing one nonzero product (exact in float32)."""
    D, K = 32, 128
    packed, scale, want = _every_code_and_scale(D, K)
    if swizzled:
        scale = inv.swizzle_scales(scale[0])[None]
    work = torch.float32 if impl.interpreted() else torch.bfloat16
    BM, BN, BK, nw = (16, 16, 32, 4) if impl.interpreted() else (16, 32, 128, 4)
    dev = dict(device=DEVICE)
    h = torch.eye(K, dtype=work, **dev)
    out = torch.full((K, D), float("nan"), dtype=torch.float32, **dev)
    P = K
    moe_down_fwd_kernel[(P // BM, D // BN)](
        h, None, packed.to(DEVICE), scale.to(DEVICE), torch.ones(1, **dev), None,
        torch.arange(P, **dev), torch.zeros(P // BM, dtype=torch.int64, **dev), torch.ones(P, **dev), out, P,
        D=D, I=K, BM=BM, BN=BN, BK=BK, NVFP4=True, W4A4=False, DOT=imoe._DOT[work],
        PRECISION="ieee" if work == torch.float32 else "tf32", SWIZZLED=swizzled, SPLIT=split, num_warps=nw)
    got = out.T.double().cpu().numpy()
    bad = np.argwhere(got != want)
    assert not len(bad), f"{len(bad)} elements differ, first {tuple(bad[0])}: {got[tuple(bad[0])]} vs {want[tuple(bad[0])]}"


def _layer(seed: int):
    from tests.test_moe_nvfp4_scales import _layer as layer
    return layer(seed)


@interpreter_only
@pytest.mark.parametrize("w4a4", [False, True], ids=["w4a16", "w4a4"])
@pytest.mark.parametrize("swizzled", [False, True], ids=["linear", "swizzled"])
def test_split_tiles_match_the_oracle_and_the_interleaved_tiles(w4a4, swizzled):
    """Gate/up global scales up to 10x apart ([E, 2]); W4A4 with static input scales. Every dot operand is
    the same as the interleaved path's, only the order of the two half-dots differs: float32 summation
    order apart, the outputs agree, and both hold the oracle's contract."""
    from oracle import moe as omoe
    from oracle import nvfp4 as onv
    from tests.test_moe_kernels import routing_of, t32, within
    w, x, r = _layer(11)
    nv = onv.quantize_experts(w.gate_up_proj, w.down_proj)
    if w4a4:
        nv = onv.with_input_scales(nv, np.full(8, 300.0), np.full(8, 40.0))
    want = omoe.experts(w, x, r, nvfp4=nv, w4a4=w4a4)
    nvt = inv.experts_to(onv.swizzle_experts(nv) if swizzled else nv)
    args = (w.map(t32), t32(x), routing_of(r))
    split = imoe.experts_with(*args, nvt, w4a4, split=True)
    inter = imoe.experts_with(*args, nvt, w4a4, split=False)
    within("nvfp4", "experts", "output", split, want)
    scale = float(inter.abs().max())
    assert float((split - inter).abs().max()) <= 1e-6 * scale


@interpreter_only
def test_split_tiles_need_a_reduction_tile_of_32():
    """Two half-dots of K >= 16 per step: BK 16 is refused for NVFP4 weights, allowed for dense ones."""
    E, D, I = 2, 32, 16
    nv = inv.quantize_experts(torch.randn(E, 2 * I, D), torch.randn(E, D, I))
    x, ids, wts = torch.randn(3, D), torch.zeros(3, 1, dtype=torch.int64), torch.ones(3, 1)
    with pytest.raises(ValueError, match="split NVFP4 tiles need BK a multiple of 32"):
        imoe._grouped(x, ids, wts, E, I, nv=nv, tiles=(16, 16, 16, 4), split=True)
    imoe._grouped(x, ids, wts, E, I, nv=nv, tiles=(16, 16, 16, 4), split=False)
    imoe._grouped(x, ids, wts, E, I, dense=(torch.randn(E, 2 * I, D), torch.randn(E, D, I)), tiles=(16, 16, 16, 4),
                  split=True)


@interpreter_only
def test_the_candidates_run_one_tile_form_each():
    """impl.candidates.nvfp4_split / nvfp4_interleaved (the GPU gate's candidate and peer, glmgate gate
    --candidate ... on CUDA): each one's experts equal impl.moe.experts_with forcing its form, bit for bit.
    (Their contracts are nvfp4.gate's, run on the GPU; on the CPU the default's split W4A16 and
    interleaved W4A4 run in tests/test_matrix.py.)"""
    from impl.candidates import nvfp4_interleaved, nvfp4_split
    from oracle import nvfp4 as onv
    from tests.test_moe_kernels import routing_of, t32
    w, x, r = _layer(11)
    nvt = inv.experts_to(onv.quantize_experts(w.gate_up_proj, w.down_proj))
    args = (w.map(t32), t32(x), routing_of(r))
    for cand, split in ((nvfp4_split.Candidate, True), (nvfp4_interleaved.Candidate, False)):
        got = cand.moe.experts(*args, nvfp4=nvt)
        assert torch.equal(got, imoe.experts_with(*args, nvt, False, split=split))
