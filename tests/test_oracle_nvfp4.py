"""The NVFP4 row of the correctness matrix (TESTING.md), on the NumPy oracle (NVFP4.md A1-A5).

Arbiters independent of oracle/nvfp4.py: ml_dtypes' float4_e2m1fn cast (RNE, saturating) for the
element rounding, a per-element byte formula for the swizzle, float64 math for the error bound.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invariants.contracts import float32_tolerance
from oracle import nvfp4
from oracle.types import NVFP4Tensor

FP8 = ml_dtypes.float8_e4m3fn


def _weight(seed, N=8, K=64, scale=1.0):
    rng = np.random.default_rng(seed)
    return (scale * rng.normal(size=(N, K)) * rng.lognormal(0, 1.5, size=(N, K // 16)).repeat(16, 1)
            ).astype(np.float32)


# ----------------------------------------------------------------------------- elements


# a float32 scale against its float64 formula (invariants/contracts.d/defaults.toml [float32])
STORED_SCALE = float32_tolerance("stored_scale")
TIES = [(0.25, 0.0), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0), (3.5, 4.0), (5.0, 4.0)]


@pytest.mark.parametrize("v,want", TIES + [(-v, -w) for v, w in TIES], ids=lambda p: f"{p:+g}")
def test_quantize_e2m1_ties_to_even(v, want):
    assert nvfp4.dequantize_e2m1(nvfp4.quantize_e2m1(v)) == want


def test_quantize_e2m1_threshold_table():
    eps = 1e-6
    table = [(0.25 + eps, 0.5), (0.75 - eps, 0.5), (1.25 + eps, 1.5), (1.75 - eps, 1.5),
             (2.5 + eps, 3.0), (3.5 - eps, 3.0), (5.0 + eps, 6.0), (6.0, 6.0), (0.5, 0.5), (0.1, 0.0)]
    for v, want in table:
        assert nvfp4.dequantize_e2m1(nvfp4.quantize_e2m1(v)) == want, v
        assert nvfp4.dequantize_e2m1(nvfp4.quantize_e2m1(-v)) == -want, -v


def test_quantize_e2m1_saturates_above_6():
    v = np.array([6.0, 6.5, 7.0, 100.0, np.inf])
    assert (nvfp4.quantize_e2m1(v) == 7).all() and (nvfp4.quantize_e2m1(-v) == 15).all()


def test_quantize_e2m1_signed_zero():
    codes = nvfp4.quantize_e2m1(np.array([0.0, -0.0, -0.1, -0.25]))
    assert (codes == 0).all(), codes                      # every zero is +0 (code 0)
    assert nvfp4.dequantize_e2m1(8) == 0.0 and nvfp4.dequantize_e2m1(0) == 0.0


def test_quantize_e2m1_matches_ml_dtypes_on_a_dense_grid():
    """Every multiple of 1/64 in [-8, 8] (all midpoints included) rounds like float4_e2m1fn."""
    v = np.arange(-8 * 64, 8 * 64 + 1) / 64.0
    got = nvfp4.dequantize_e2m1(nvfp4.quantize_e2m1(v))
    want = v.astype(ml_dtypes.float4_e2m1fn).astype(np.float64)
    assert np.array_equal(got, want)


def test_quantize_e2m1_refuses_nan():
    with pytest.raises(ValueError, match="v: contains NaN"):
        nvfp4.quantize_e2m1(np.array([1.0, np.nan]))


def test_codes_values_codes_round_trip():
    codes = np.arange(16, dtype=np.uint8)
    back = nvfp4.quantize_e2m1(nvfp4.dequantize_e2m1(codes))
    assert np.array_equal(back[codes != 8], codes[codes != 8]) and back[8] == 0


# ----------------------------------------------------------------------------- packing


def test_pack_low_nibble_first():
    assert nvfp4.pack(np.array([[1, 2, 15, 0]])).tolist() == [[0x21, 0x0F]]


@given(rows=st.integers(0, 5), half_k=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
@settings(deadline=None, max_examples=30)
def test_pack_unpack_round_trip(rows, half_k, seed):
    codes = np.random.default_rng(seed).integers(0, 16, size=(rows, 2 * half_k), dtype=np.uint8)
    packed = nvfp4.pack(codes)
    assert packed.shape == (rows, half_k) and packed.dtype == np.uint8
    assert np.array_equal(nvfp4.unpack(packed), codes)


def test_pack_refuses_bad_codes():
    with pytest.raises(ValueError, match="codes: expected codes in 0..15"):
        nvfp4.pack(np.array([16, 0]))
    with pytest.raises(ValueError, match="even last axis"):
        nvfp4.pack(np.array([1, 2, 3]))


# ----------------------------------------------------------------------------- swizzle


@given(M=st.integers(1, 300), Kb=st.integers(1, 12), seed=st.integers(0, 2**32 - 1))
@settings(deadline=None, max_examples=25)
def test_swizzle_unswizzle_round_trip(M, Kb, seed):
    s = np.random.default_rng(seed).uniform(0, 448, size=(M, Kb)).astype(FP8)
    sw = nvfp4.swizzle_scales(s)
    Mp, Kp = -(-M // 128) * 128, -(-Kb // 4) * 4
    assert sw.shape == (Mp, Kp) and sw.dtype == FP8
    back = nvfp4.unswizzle_scales(sw, (M, Kb))
    assert np.array_equal(back.view(np.uint8), s.view(np.uint8))


@pytest.mark.parametrize("M,Kb", [(128, 4), (256, 8), (130, 5)])
def test_swizzle_byte_formula(M, Kb):
    """Element (m, k) sits at ((m//128·Kt + k//4)·32 + m%32)·16 + ((m//32)%4)·4 + k%4 (NVFP4.md A5)."""
    s = np.arange(M * Kb, dtype=np.int64).reshape(M, Kb)
    flat = nvfp4.swizzle_scales(s).reshape(-1)
    m, k = np.meshgrid(np.arange(M), np.arange(Kb), indexing="ij")
    Kt = -(-Kb // 4)
    off = ((m // 128 * Kt + k // 4) * 32 + m % 32) * 16 + (m // 32) % 4 * 4 + k % 4
    assert np.array_equal(flat[off], s)
    assert np.array_equal(nvfp4.swizzled_offset(m, k, Kb), off)
    assert not np.array_equal(nvfp4.swizzle_scales(s)[:M, :Kb], s)      # not the identity at full tiles


# ----------------------------------------------------------------------------- global scales


def test_global_scale_directions():
    amax = np.float32(3.7)
    G, g = nvfp4.global_scale_encode(amax), nvfp4.global_scale_decode(amax)
    assert G == np.float32(2688) / amax and g == amax / np.float32(2688)
    assert abs(float(nvfp4.flip_global_scale(G)) / float(g) - 1) <= float32_tolerance("one_ulp")


@pytest.mark.parametrize("amax", [0.0, np.inf, np.nan, -1.0])
def test_global_scale_refuses_bad_amax(amax):
    for fn in (nvfp4.global_scale_encode, nvfp4.global_scale_decode):
        with pytest.raises(ValueError, match="amax"):
            fn(amax)


def test_flip_is_an_involution_on_reciprocals():
    x = np.float32(2.0) ** np.random.default_rng(0).uniform(-20, 20, 10000).astype(np.float32)
    f = nvfp4.flip_global_scale(x)
    assert np.array_equal(nvfp4.flip_global_scale(nvfp4.flip_global_scale(f)), f)


# ----------------------------------------------------------------------------- quantizer


def test_quantize_amax_block_gets_448():
    w = _weight(1)
    t = nvfp4.quantize(w)
    s = t.block_scale.astype(np.float32)
    r, b = np.unravel_index(np.argmax(np.abs(w)), w.shape)
    assert s[r, b // 16] == 448.0 and s.max() == 448.0
    assert t.global_decode.dtype == np.float32


def test_quantize_all_zero_blocks():
    w = _weight(2)
    w[3, 16:48] = 0.0
    t = nvfp4.quantize(w)
    assert t.block_scale[3, 1:3].astype(np.float32).tolist() == [0.0, 0.0]
    assert (nvfp4.unpack(t.packed)[3, 16:48] == 0).all()
    x = nvfp4.dequantize(t)
    assert (x[3, 16:48] == 0).all() and np.isfinite(x).all()


def test_quantize_fp8_subnormal_scales():
    """Tiny blocks get subnormal E4M3 scales (< 2^-6), not zero, and still dequantize sensibly."""
    w = _weight(3, N=4, K=32)
    w[0, :16] = np.linspace(-1, 1, 16) * 1e-5 * np.abs(w).max()
    t = nvfp4.quantize(w)
    s = float(t.block_scale[0, 0].astype(np.float32))
    assert 2 ** -9 <= s < 2 ** -6
    x = nvfp4.dequantize(t)
    assert np.abs(x[0, :16] - w[0, :16]).max() <= 0.5 * np.abs(w[0, :16]).max()


def test_quantize_below_half_subnormal_rounds_scale_to_zero():
    w = _weight(4, N=2, K=32)
    w[1, 16:] = 1e-7 * np.abs(w).max()
    t = nvfp4.quantize(w)
    assert float(t.block_scale[1, 1].astype(np.float32)) == 0.0
    assert (nvfp4.dequantize(t)[1, 16:] == 0).all()


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 6), kb=st.integers(1, 6),
       log_scale=st.floats(-30, 30))
@settings(deadline=None, max_examples=40)
def test_dequantize_error_bound(seed, n, kb, log_scale):
    """|x - x_hat| <= bound(|v|) · s_b / G with 1.0 on [4, 6], 0.5 on [2, 4), 0.25 below 2 (A3.4),
    plus up to 0.375 on the block max from the clamp at 6 after FP8 rounding of s_b."""
    w = _weight(seed, N=n, K=16 * kb, scale=2.0 ** log_scale)
    t = nvfp4.quantize(w)
    G = 1.0 / float(t.global_decode)
    s = np.repeat(t.block_scale.astype(np.float64), 16, axis=1)
    err = np.abs(nvfp4.dequantize(t) - w.astype(np.float64))
    v = np.abs(w.astype(np.float64)) * G / np.where(s > 0, s, 1)
    bound = np.where(v >= 4, 1.0, np.where(v >= 2, 0.5, 0.25))
    bound = np.where(v > 6, 0.375 + v - 6, bound)
    unit = s / G
    ok = (err <= bound * unit * (1 + 1e-5) + 1e-30) | (s == 0)
    assert ok.all(), (err[~ok], (bound * unit)[~ok])
    assert (err[s == 0] <= 2 ** -10 * 6 / G * 1.0001).all()


def test_dequantize_is_exact_and_float32_rounds_once():
    t = nvfp4.quantize(_weight(5))
    x = nvfp4.dequantize(t)
    e = nvfp4.dequantize_e2m1(nvfp4.unpack(t.packed)).astype(np.float32)
    s = np.repeat(t.block_scale.astype(np.float32), 16, axis=1)
    f32 = (e * s) * t.global_decode
    assert f32.dtype == np.float32 and np.array_equal(x.astype(np.float32), f32)


def test_quantize_refuses_bad_input():
    with pytest.raises(ValueError, match="K=24"):
        nvfp4.quantize(np.ones((2, 24)))
    with pytest.raises(ValueError, match="w: contains NaN"):
        nvfp4.quantize(np.full((1, 16), np.nan))
    with pytest.raises(ValueError, match="amax"):
        nvfp4.quantize(np.zeros((1, 16)))
    with pytest.raises(ValueError, match=r"w: expected \[N, K\]"):
        nvfp4.quantize(np.ones(16))


def test_quantize_explicit_global_scale():
    w = _weight(6)
    G = nvfp4.global_scale_encode(np.float32(2 * np.abs(w).max()))
    t = nvfp4.quantize(w, global_scale=G)
    assert t.block_scale.astype(np.float32).max() <= 224.0
    assert t.global_decode == nvfp4.flip_global_scale(G)


def test_quantize_clamps_scales_at_448_for_a_large_global_scale():
    """G larger than 2688 / amax pushes G·amax_b/6 past 464, where the E4M3 cast gives NaN: clamp to 448."""
    w = _weight(11)
    G = 4 * nvfp4.global_scale_encode(np.abs(w).max())
    t = nvfp4.quantize(w, global_scale=G)
    s = t.block_scale.astype(np.float32)
    assert not np.isnan(s).any() and s.max() == 448.0
    x = nvfp4.dequantize(t)
    assert np.isfinite(x).all() and np.abs(x).max() == 6 * 448 * float(t.global_decode)


def test_qdq_activation_matches_weight_quantizer():
    """Per-row activation quant-dequant is the weight recipe with a static encode scale (A6)."""
    x = _weight(7, N=3, K=48)
    G = nvfp4.global_scale_encode(np.abs(x).max())
    t = nvfp4.quantize(x, global_scale=G)
    got = nvfp4.qdq_activation(x, G)
    assert np.allclose(got, nvfp4.dequantize(t), rtol=float32_tolerance("reordered_product"), atol=0)
    assert got.shape == x.shape
    assert np.array_equal(nvfp4.qdq_activation(x[None], G)[0], got)
    with pytest.raises(ValueError, match="input_global_scale"):
        nvfp4.qdq_activation(x, 0.0)


# ----------------------------------------------------------------------------- checkpoints


PREFIX = "model.layers.3.mlp.experts.5.down_proj"


def _ct_and_mo(seed=8, with_input=False):
    t = nvfp4.quantize(_weight(seed))
    if with_input:
        t = t._replace(input_global_scale=nvfp4.flip_global_scale(nvfp4.global_scale_decode(np.float32(7.5))))
    return t, nvfp4.to_compressed_tensors(PREFIX, t), nvfp4.to_modelopt(PREFIX, t)


def test_checkpoint_layouts():
    t, ct, mo = _ct_and_mo(with_input=True)
    N, K = t.shape
    assert set(ct) == {f"{PREFIX}.{n}" for n in ("weight_packed", "weight_scale", "weight_global_scale",
                                                 "input_global_scale")}
    assert set(mo) == {f"{PREFIX}.{n}" for n in ("weight", "weight_scale", "weight_scale_2", "input_scale")}
    assert ct[f"{PREFIX}.weight_packed"].shape == (N, K // 2) and ct[f"{PREFIX}.weight_scale"].dtype == FP8
    assert ct[f"{PREFIX}.weight_global_scale"].shape == (1,) and mo[f"{PREFIX}.weight_scale_2"].shape == ()
    # encode direction in compressed-tensors, decode direction in ModelOpt
    product = ct[f"{PREFIX}.weight_global_scale"][0] * mo[f"{PREFIX}.weight_scale_2"]
    assert product == pytest.approx(1, rel=STORED_SCALE)
    assert ct[f"{PREFIX}.weight_global_scale"][0] > 1 > mo[f"{PREFIX}.weight_scale_2"]
    assert np.array_equal(ct[f"{PREFIX}.weight_scale"].view(np.uint8), t.block_scale.view(np.uint8))


@pytest.mark.parametrize("with_input", [False, True])
def test_checkpoint_round_trip(with_input):
    t, ct, mo = _ct_and_mo(with_input=with_input)
    for back in (nvfp4.from_compressed_tensors(ct, PREFIX), nvfp4.from_modelopt(mo, PREFIX)):
        assert np.array_equal(back.packed, t.packed)
        assert np.array_equal(back.block_scale.view(np.uint8), t.block_scale.view(np.uint8))
        assert back.global_decode == t.global_decode
        assert back.input_global_scale == t.input_global_scale
        assert np.array_equal(nvfp4.dequantize(back), nvfp4.dequantize(t))


def test_two_conventions_dequantize_identically():
    """The same weight, written in both conventions and read back, dequantizes bit-identically."""
    for seed in range(20):
        t = nvfp4.quantize(_weight(seed, N=4, K=32))
        a = nvfp4.dequantize(nvfp4.from_compressed_tensors(nvfp4.to_compressed_tensors("m", t), "m"))
        b = nvfp4.dequantize(nvfp4.from_modelopt(nvfp4.to_modelopt("m", t), "m"))
        assert np.array_equal(a, b)


def test_global_scale_in_the_wrong_direction_is_visible():
    """Reading an encode-direction value as decode scales the tensor by G² (the classic A2 bug)."""
    t, ct, _ = _ct_and_mo()
    wrong = t._replace(global_decode=ct[f"{PREFIX}.weight_global_scale"].reshape(()))
    ratio = np.abs(nvfp4.dequantize(wrong)).max() / np.abs(nvfp4.dequantize(t)).max()
    assert ratio > 1e3


def test_writer_refuses_a_non_reciprocal_decode_scale():
    t = nvfp4.quantize(_weight(9))
    x = np.float32(2.0) ** np.random.default_rng(1).uniform(-10, 10, 200).astype(np.float32)
    bad = x[nvfp4.flip_global_scale(nvfp4.flip_global_scale(x)) != x][0]
    with pytest.raises(ValueError, match="global_decode"):
        nvfp4.to_compressed_tensors("m", t._replace(global_decode=bad))
    assert nvfp4.from_modelopt(nvfp4.to_modelopt("m", t._replace(global_decode=bad)), "m").global_decode == bad


def _broken(kind):
    _, ct, mo = _ct_and_mo()
    nan_scale = ct[f"{PREFIX}.weight_scale"].copy()
    nan_scale[0, 0] = np.nan
    neg_scale = ct[f"{PREFIX}.weight_scale"].astype(np.float32)
    neg_scale[1, 1] = -2.0
    cases = {
        "ct-missing-packed": (ct, f"{PREFIX}.weight_packed", None, "missing"),
        "ct-missing-global": (ct, f"{PREFIX}.weight_global_scale", None, "missing"),
        "ct-scale-shape": (ct, f"{PREFIX}.weight_scale", ct[f"{PREFIX}.weight_scale"][:, :-1], "shape"),
        "ct-scale-dtype": (ct, f"{PREFIX}.weight_scale", ct[f"{PREFIX}.weight_scale"].astype(np.float32),
                           "float8_e4m3fn"),
        "ct-scale-nan": (ct, f"{PREFIX}.weight_scale", nan_scale, "NaN"),
        "ct-scale-negative": (ct, f"{PREFIX}.weight_scale", neg_scale.astype(FP8), "negative"),
        "ct-global-zero": (ct, f"{PREFIX}.weight_global_scale", np.zeros(1, np.float32), "> 0"),
        "ct-global-inf": (ct, f"{PREFIX}.weight_global_scale", np.full(1, np.inf, np.float32), "finite"),
        "ct-global-shape": (ct, f"{PREFIX}.weight_global_scale", np.ones(2, np.float32), "one value"),
        "ct-packed-dtype": (ct, f"{PREFIX}.weight_packed", ct[f"{PREFIX}.weight_packed"].astype(np.int32),
                            "uint8"),
        "ct-packed-odd-k": (ct, f"{PREFIX}.weight_packed", ct[f"{PREFIX}.weight_packed"][:, :-4], "K=56"),
        "mo-missing-weight": (mo, f"{PREFIX}.weight", None, "missing"),
        "mo-missing-scale2": (mo, f"{PREFIX}.weight_scale_2", None, "missing"),
        "mo-scale2-zero": (mo, f"{PREFIX}.weight_scale_2", np.float32(0).reshape(()), "> 0"),
        "mo-scale2-nan": (mo, f"{PREFIX}.weight_scale_2", np.float32(np.nan).reshape(()), "finite"),
        "mo-scale-shape": (mo, f"{PREFIX}.weight_scale", mo[f"{PREFIX}.weight_scale"][:-1], "shape"),
        "mo-input-zero": (mo, f"{PREFIX}.input_scale", np.float32(0).reshape(()), "> 0"),
    }
    tensors, name, value, match = cases[kind]
    tensors = dict(tensors)
    if value is None:
        del tensors[name]
    else:
        tensors[name] = value
    return tensors, name, match


@pytest.mark.parametrize("kind", [
    "ct-missing-packed", "ct-missing-global", "ct-scale-shape", "ct-scale-dtype", "ct-scale-nan",
    "ct-scale-negative", "ct-global-zero", "ct-global-inf", "ct-global-shape", "ct-packed-dtype",
    "ct-packed-odd-k", "mo-missing-weight", "mo-missing-scale2", "mo-scale2-zero", "mo-scale2-nan",
    "mo-scale-shape", "mo-input-zero"])
def test_bad_checkpoint_raises_naming_the_tensor(kind):
    tensors, name, match = _broken(kind)
    reader = nvfp4.from_compressed_tensors if kind.startswith("ct") else nvfp4.from_modelopt
    with pytest.raises(ValueError) as info:
        reader(tensors, PREFIX)
    assert name in str(info.value) and match in str(info.value), str(info.value)


def test_check_tensor_refuses_bad_fields():
    t = nvfp4.quantize(_weight(10))
    with pytest.raises(ValueError, match="NVFP4Tensor.global_decode"):
        nvfp4.dequantize(t._replace(global_decode=np.float32(0)))
    with pytest.raises(ValueError, match="NVFP4Tensor.block_scale"):
        nvfp4.dequantize(t._replace(block_scale=t.block_scale[:, :2]))
    with pytest.raises(ValueError, match="NVFP4Tensor"):
        nvfp4.dequantize(tuple(t))
    assert isinstance(t, NVFP4Tensor) and t.shape == (8, 64)
