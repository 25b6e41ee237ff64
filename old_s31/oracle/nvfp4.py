"""NVFP4 (E2M1 elements, E4M3 block scales, FP32 global scale) in NumPy: the bit-level truth (NVFP4.md).

Letters: N rows (output features), K reduction dim (the weight is [N, K]), K/16 block scales per row,
M rows of a scale matrix (= N), Kb scale columns (= K/16), Mp / Kp padded to 128 / 4 (swizzle).

Format (A1): a nibble's low 3 bits index E2M1 = {0, 0.5, 1, 1.5, 2, 3, 4, 6}, bit 3 is the sign;
one float8_e4m3fn scale per 16 consecutive elements along K; one float32 global scale per tensor.
x_hat = e2m1(code) · fp8(block_scale) · global_decode.

Global-scale directions (A2): ENCODE G = 2688 / amax (compressed-tensors `weight_global_scale`,
`input_global_scale`) and DECODE g = amax / 2688 (ModelOpt `weight_scale_2`, `input_scale`).
NVFP4Tensor keeps the weight's DECODE value (what kernels receive) and the activation's ENCODE value
(what the W4A4 activation quantizer multiplies by). Crossing directions is the float32 reciprocal
`flip_global_scale`, as the loaders do; flip(flip(s)) == s exactly iff s is itself a float32
reciprocal, which holds for every global_decode that `quantize` makes (g = flip(G)).

Quantizer (A3), with G the ENCODE global scale, all in float32 after casting x to float32:
    s_b = fp8_e4m3(min(G · (amax_b / 6), 448))       (round to nearest even, clamped: the cast is not saturating)
    v   = (x · G) / s_b                               (this ordering, fixed; ModelOpt's x / (s_b / G) may differ by 1 ulp)
    code = round-to-nearest-even E2M1 of clip(v, -6, 6)
Zero convention: a block whose scale is 0 (all-zero, or so small that G·amax_b/6 < 2^-10 rounds to 0 in
FP8) gets scale 0 and all codes 0 (vLLM's guarded reciprocal), so it dequantizes to exact zeros.
ModelOpt instead writes scale 1.0 (all-zero) or floors at 2^-9; `dequantize` reads either correctly.
Every zero is encoded as code 0 (+0), never code 8 (-0): compare zeros by value, not by code (A3.3).
"""
from __future__ import annotations

from typing import Mapping, Optional

import ml_dtypes
import numpy as np

from oracle.types import CT, MODELOPT, NVFP4_LEAVES, NVFP4Experts, NVFP4Tensor, fused_experts

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
E2M1_MAX = 6.0
FP8_MAX = 448.0
FP8 = ml_dtypes.float8_e4m3fn
BLOCK = 16
GLOBAL_NUMERATOR = np.float32(E2M1_MAX * FP8_MAX)               # 2688
# the 7 midpoints between neighbours of E2M1 and, per midpoint, whether a tie rounds UP: the upper
# neighbour has the even code there (0.75 -> 1, 1.75 -> 2, 3.5 -> 4), else it rounds down
_BOUNDS = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
_TIE_UP = np.array([False, True, False, True, False, True, False])
# the 128x4 swizzle tile (A5): 128 rows as 4 x 32, 4 scale columns
TILE_ROWS, TILE_COLS = 128, 4
# NVFP4Tensor.scale_layout: row-major [N, K/16], or the 128x4 tiles [Mp, Kp] (swizzle_scales)
LINEAR, SWIZZLED = "linear", "swizzled"
SCALE_LAYOUTS = (LINEAR, SWIZZLED)


# ----------------------------------------------------------------------------- elements (E2M1)


def quantize_e2m1(v) -> np.ndarray:
    """Round to the nearest E2M1 value, ties to the even code, saturating at ±6 (NVFP4.md A3.3).

    Thresholds on |v|: <=0.25 -> 0, <0.75 -> 0.5, <=1.25 -> 1, <1.75 -> 1.5, <=2.5 -> 2, <3.5 -> 3,
    <=5 -> 4, >5 -> 6 (inf included). Sign bit 3 is set iff v < 0 and the magnitude code is not 0.

    Args:
        v: any shape, already scaled into the E2M1 range (NaN refused)
    Returns:
        codes: uint8, same shape, in 0..15
    """
    v = np.asarray(v, dtype=np.float64)
    if np.isnan(v).any():
        raise ValueError("v: contains NaN, expected finite or ±inf values to quantize")
    mag = np.abs(v)[..., None]
    above = np.where(_TIE_UP, mag >= _BOUNDS, mag > _BOUNDS)                     # [..., 7]
    code = above.sum(axis=-1).astype(np.uint8)
    return code | np.where((v < 0) & (code > 0), 8, 0).astype(np.uint8)


def dequantize_e2m1(codes) -> np.ndarray:
    """codes (uint8 0..15) -> float64 values: E2M1[code & 7], negated when bit 3 is set (code 8 = -0)."""
    codes = _codes(codes, "codes")
    return np.where(codes & 8, -1.0, 1.0) * E2M1[codes & 7]


def _codes(codes, name: str) -> np.ndarray:
    codes = np.asarray(codes)
    if not np.issubdtype(codes.dtype, np.integer):
        raise ValueError(f"{name}: expected an integer array of 4-bit codes, got dtype {codes.dtype}")
    if codes.size and (codes.min() < 0 or codes.max() > 15):
        raise ValueError(f"{name}: expected codes in 0..15, found [{codes.min()}, {codes.max()}]")
    return codes.astype(np.uint8)


# ----------------------------------------------------------------------------- packing (A4)


def pack(codes) -> np.ndarray:
    """codes [..., K] -> uint8 [..., K/2]: element 2j in the LOW nibble, 2j+1 in the high one (A4)."""
    codes = _codes(codes, "codes")
    if codes.ndim < 1 or codes.shape[-1] % 2:
        raise ValueError(f"codes: expected an even last axis K, got shape {codes.shape}")
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def unpack(packed) -> np.ndarray:
    """uint8 [..., K/2] -> codes [..., K]: low nibble first (the inverse of `pack`)."""
    packed = np.asarray(packed)
    if packed.dtype != np.uint8:
        raise ValueError(f"packed: expected uint8, got dtype {packed.dtype}")
    out = np.stack([packed & 0xF, packed >> 4], axis=-1)                        # [..., K/2, 2]
    return out.reshape(packed.shape[:-1] + (2 * packed.shape[-1],))


# ----------------------------------------------------------------------------- global scales (A2)


def _positive_finite(name: str, a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float32)
    if not np.isfinite(a).all():
        raise ValueError(f"{name}: {a}, expected finite values")
    if (a <= 0).any():
        raise ValueError(f"{name}: {a}, expected > 0 (a zero amax or scale has no global scale)")
    return a


def global_scale_encode(amax):
    """G = 2688 / amax in float32: compressed-tensors `*_global_scale` (encode direction, A2)."""
    return GLOBAL_NUMERATOR / _positive_finite("amax", amax)


def global_scale_decode(amax):
    """g = amax / 2688 in float32: ModelOpt `weight_scale_2` / `input_scale` (decode direction, A2)."""
    return _positive_finite("amax", amax) / GLOBAL_NUMERATOR


def flip_global_scale(scale):
    """encode <-> decode: float32 1 / scale, as the loaders compute it (A2).

    flip(flip(s)) == s iff s is itself a float32 reciprocal (flip of something); flip(flip(flip(s)))
    == flip(s) always. global_scale_decode(a) and flip(global_scale_encode(a)) differ by <= 1 ulp.
    """
    return np.float32(1.0) / _positive_finite("scale", scale)


# ----------------------------------------------------------------------------- quantizer (A3)


def _quantize_blocks(x32, G):
    """x32 float32 [..., K] with the ENCODE scale G -> (codes uint8 [..., K], scales fp8 [..., K/16])."""
    blocks = x32.reshape(x32.shape[:-1] + (-1, BLOCK))                          # [..., K/16, 16]
    amax_b = np.abs(blocks).max(axis=-1)                                         # [..., K/16]
    with np.errstate(over="ignore"):
        raw = np.minimum(G * (amax_b / np.float32(E2M1_MAX)), np.float32(FP8_MAX))
        scales = raw.astype(FP8)
        s = scales.astype(np.float32)[..., None]                                # [..., K/16, 1]
        v = np.where(s > 0, (blocks * G) / np.where(s > 0, s, 1), 0).astype(np.float32)
    codes = quantize_e2m1(np.clip(v, -E2M1_MAX, E2M1_MAX))
    return codes.reshape(x32.shape), scales


def _check_k(K: int, name: str) -> None:
    if K % BLOCK:
        raise ValueError(f"{name}: K={K} is not a multiple of {BLOCK} (one FP8 scale per 16 elements along K)")


def quantize(w, global_scale=None) -> NVFP4Tensor:
    """Quantize a weight [N, K] to NVFP4 with the recipe of the module docstring (NVFP4.md A3).

    Args:
        w: [N, K] finite, K % 16 == 0; cast to float32 first
        global_scale: ENCODE-direction G; None -> global_scale_encode(max |w|) (raises if w is all zero)
    Returns:
        NVFP4Tensor with global_decode = flip_global_scale(G) (what a compressed-tensors loader computes);
        the block holding the tensor amax gets scale exactly 448 when G is the default
    """
    w32 = np.asarray(w, dtype=np.float32)
    if w32.ndim != 2:
        raise ValueError(f"w: expected [N, K], got shape {w32.shape}")
    _check_k(w32.shape[1], "w")
    if not np.isfinite(w32).all():
        raise ValueError("w: contains NaN or inf (in float32), expected finite weights")
    G = global_scale_encode(np.abs(w32).max(initial=0.0)) if global_scale is None \
        else _positive_finite("global_scale", global_scale)
    codes, scales = _quantize_blocks(w32, np.float32(G))
    return NVFP4Tensor(pack(codes), scales, np.float32(flip_global_scale(G)))


def dequantize(t: NVFP4Tensor) -> np.ndarray:
    """x_hat = e2m1(code) · fp8(block_scale) · global_decode, [N, K] float64 (NVFP4.md A1).

    Exact: the three significands (2 + 4 + 24 bits) fit in float64's 53, so no rounding happens in
    any order. Casting the result to float32 rounds once, which equals (e2m1 · scale) · global_decode
    computed in float32 (e2m1 · scale is exact there), the order a kernel's epilogue uses.
    Block scales in either layout (t.scale_layout); a fused gate_up's global_decode [2] scales rows
    0..N/2-1 by the gate's value and the rest by the up's.
    """
    check_tensor(t)
    N, K = t.shape
    scale = linear_scales(t).astype(np.float64)                                 # [N, K/16]
    g = np.asarray(t.global_decode, np.float32).astype(np.float64).reshape(-1)   # [1] or [2]
    rows = np.repeat(g, N // g.size)[:, None]                                    # [N, 1]
    return dequantize_e2m1(unpack(t.packed)) * np.repeat(scale, BLOCK, axis=-1) * rows


def linear_scales(t: NVFP4Tensor) -> np.ndarray:
    """t's block scales [N, K/16] in the linear layout, unswizzled where t.scale_layout is "swizzled"."""
    N, K = t.shape
    s = np.asarray(t.block_scale)
    return unswizzle_scales(s, (N, K // BLOCK)) if t.scale_layout == SWIZZLED else s


def qdq_activation(x, input_global_scale):
    """W4A4 activation quant-dequant per row, per 16 along K (NVFP4.md A6; vLLM ref_nvfp4_quant_dequant).

    s_a = fp8(min(G_a · amax_block / 6, 448)), q = rne_e2m1(clip(x · G_a / s_a, ±6)), same recipe and
    zero convention as `quantize` but with the static ENCODE scale G_a = input_global_scale.

    Args:
        x: [..., K] activations (cast to float32), K % 16 == 0
    Returns:
        x_hat: [..., K] float64 = e2m1(q) · s_a / G_a
    """
    x32 = np.asarray(x, dtype=np.float32)
    _check_k(x32.shape[-1] if x32.ndim else 1, "x")
    if not np.isfinite(x32).all():
        raise ValueError("x: contains NaN or inf (in float32), expected finite activations")
    G = np.float32(_positive_finite("input_global_scale", input_global_scale))
    codes, scales = _quantize_blocks(x32, G)
    s = np.repeat(scales.astype(np.float64), BLOCK, axis=-1)
    return dequantize_e2m1(codes) * s / np.float64(G)


def check_tensor(t: NVFP4Tensor) -> None:
    """Dtypes, shapes ([N, K/2] uint8, [N, K/16] fp8) and finite positive scales; raise naming the field."""
    if not isinstance(t, NVFP4Tensor):
        raise ValueError(f"t: expected an NVFP4Tensor, got {type(t).__name__}")
    packed, scale = np.asarray(t.packed), np.asarray(t.block_scale)
    if packed.dtype != np.uint8 or packed.ndim != 2:
        raise ValueError(f"NVFP4Tensor.packed: expected uint8 [N, K/2], got {packed.dtype} {packed.shape}")
    N, K = t.shape
    _check_k(K, "NVFP4Tensor.packed")
    if t.scale_layout not in SCALE_LAYOUTS:
        raise ValueError(f"NVFP4Tensor.scale_layout: {t.scale_layout!r}, expected one of {SCALE_LAYOUTS}")
    want = swizzled_shape(N, K // BLOCK) if t.scale_layout == SWIZZLED else (N, K // BLOCK)
    _check_scales("NVFP4Tensor.block_scale", scale, want, t.scale_layout)
    g = np.asarray(t.global_decode)
    if g.size == 2 and g.ndim == 1:                  # a fused gate_up's (gate, up) pair: N splits in halves
        if N % 2:
            raise ValueError(f"NVFP4Tensor.global_decode: two values (gate, up) for an odd N={N}")
        for half, v in zip(("gate", "up"), g):
            _check_global(f"NVFP4Tensor.global_decode ({half} half)", v)
    else:
        _check_global("NVFP4Tensor.global_decode", t.global_decode)
    if t.input_global_scale is not None:
        _check_global("NVFP4Tensor.input_global_scale", t.input_global_scale)


def _check_scales(name: str, s: np.ndarray, want: tuple, layout: str = LINEAR) -> None:
    if s.dtype != FP8:
        raise ValueError(f"{name}: expected float8_e4m3fn, got dtype {s.dtype}")
    if s.shape != want:
        what = "[Mp, Kp] (N, K/16 padded to 128, 4; swizzled)" if layout == SWIZZLED else "[N, K/16]"
        raise ValueError(f"{name}: expected shape {what} = {want}, got {s.shape}")
    f = s.astype(np.float32)
    if np.isnan(f).any():
        raise ValueError(f"{name}: contains NaN (an E4M3 scale cast without the 448 clamp?)")
    if (f < 0).any():
        raise ValueError(f"{name}: contains negative scales, expected >= 0 (UE4M3)")


def _check_global(name: str, g) -> None:
    g = np.asarray(g)
    if g.size != 1 or g.ndim > 1:
        raise ValueError(f"{name}: expected one value (shape () or [1]), got shape {g.shape}")
    if g.dtype != np.float32:
        raise ValueError(f"{name}: expected float32, got dtype {g.dtype}")
    v = float(g.reshape(()))
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"{name}: {v}, expected a finite value > 0 (0 would make 1/0 = inf and "
                         f"inf · 0 = NaN; a BF16 module fused into an NVFP4 slot has 0)")


# ----------------------------------------------------------------------------- swizzled scales (A5)


def swizzle_scales(s) -> np.ndarray:
    """Linear scales [M, Kb] -> the 128x4 swizzled layout [Mp, Kp] of CUTLASS / cuBLASLt / FlashInfer (A5).

    Pads M to Mp (multiple of 128) and Kb to Kp (multiple of 4) with zeros, views [Mp/128, 4, 32, Kp/4, 4]
    and permutes to (0, 3, 2, 1, 4) (vLLM/SGLang `swizzle_blockscale` without the batch axis). The
    result's row-major flat order is the byte layout: element (m, k) lands at byte
        ((m // 128 · Kp/4 + k // 4) · 32 + m % 32) · 16 + ((m // 32) % 4) · 4 + k % 4,
    so every 128x4 tile is one contiguous 512-byte block. Returned reshaped to [Mp, Kp], as vLLM does.
    """
    s = np.asarray(s)
    if s.ndim != 2:
        raise ValueError(f"s: expected [M, K/16], got shape {s.shape}")
    M, Kb = s.shape
    Mp, Kp = -(-M // TILE_ROWS) * TILE_ROWS, -(-Kb // TILE_COLS) * TILE_COLS
    padded = np.zeros((Mp, Kp), dtype=s.dtype)
    padded[:M, :Kb] = s
    tiles = padded.reshape(Mp // TILE_ROWS, 4, 32, Kp // TILE_COLS, TILE_COLS)
    return np.ascontiguousarray(tiles.transpose(0, 3, 2, 1, 4)).reshape(Mp, Kp)


def unswizzle_scales(sw, shape: tuple[int, int]) -> np.ndarray:
    """The inverse of `swizzle_scales`: [Mp, Kp] swizzled -> linear [M, Kb] = `shape` (vLLM convert_swizzled_to_linear)."""
    sw = np.asarray(sw)
    M, Kb = (int(d) for d in shape)
    Mp, Kp = -(-M // TILE_ROWS) * TILE_ROWS, -(-Kb // TILE_COLS) * TILE_COLS
    if sw.size != Mp * Kp:
        raise ValueError(f"sw: expected {Mp}·{Kp} = {Mp * Kp} elements (shape {shape} padded to 128x4), "
                         f"got shape {sw.shape}")
    tiles = sw.reshape(Mp // TILE_ROWS, Kp // TILE_COLS, 32, 4, TILE_COLS)
    return np.ascontiguousarray(tiles.transpose(0, 3, 2, 1, 4)).reshape(Mp, Kp)[:M, :Kb]


def swizzled_shape(M: int, Kb: int) -> tuple[int, int]:
    """(Mp, Kp): the swizzled buffer of an [M, Kb] scale matrix, padded to whole 128x4 tiles."""
    return -(-M // TILE_ROWS) * TILE_ROWS, -(-Kb // TILE_COLS) * TILE_COLS


def swizzled_offset(m, k, scale_cols: int):
    """Byte offset of scale (m, k) in the swizzled layout of a matrix with `scale_cols` = Kb columns (A5)."""
    Kt = -(-scale_cols // TILE_COLS)
    m, k = np.asarray(m), np.asarray(k)
    return ((m // TILE_ROWS * Kt + k // TILE_COLS) * 32 + m % 32) * 16 + (m // 32) % 4 * 4 + k % 4


# ----------------------------------------------------------------------------- checkpoints (A5)


def _exact_flip(name: str, s) -> np.float32:
    """flip(s), refusing a value whose reciprocal would not read back bit-identical."""
    f = flip_global_scale(s)
    if flip_global_scale(f) != np.float32(s):
        raise ValueError(f"{name}: {float(s)!r} has no float32 reciprocal that flips back to itself; "
                         f"writing it in the other direction would change the dequantized values")
    return np.float32(f)


def _keys(prefix: str, layout: str) -> dict[str, str]:
    """{NVFP4Tensor field: `<prefix>.<leaf>`} in `layout` (oracle.types.NVFP4_LEAVES)."""
    return {field: f"{prefix}.{leaf.names[layout]}" for field, leaf in NVFP4_LEAVES.items()}


def to_compressed_tensors(prefix: str, t: NVFP4Tensor) -> dict[str, np.ndarray]:
    """compressed-tensors `nvfp4-pack-quantized` tensors of one module (A5).

    Returns:
        {prefix}.weight_packed uint8 [N, K/2];  .weight_scale fp8 [N, K/16] linear (never swizzled);
        .weight_global_scale float32 [1] ENCODE = 1 / global_decode;
        .input_global_scale float32 [1] ENCODE, only when t.input_global_scale is set (W4A4)
    """
    _check_writable(t)
    key = _keys(prefix, CT)
    out = {key["packed"]: np.asarray(t.packed).copy(),
           key["block_scale"]: np.asarray(t.block_scale).copy(),
           key["global_decode"]: np.array([_exact_flip("global_decode", t.global_decode)], dtype=np.float32)}
    if t.input_global_scale is not None:
        out[key["input_global_scale"]] = np.array([t.input_global_scale], dtype=np.float32).reshape(1)
    return out


def to_modelopt(prefix: str, t: NVFP4Tensor) -> dict[str, np.ndarray]:
    """NVIDIA ModelOpt NVFP4 tensors of one module (A5).

    Returns:
        {prefix}.weight uint8 [N, K/2];  .weight_scale fp8 [N, K/16];  .weight_scale_2 float32 scalar
        DECODE = global_decode;  .input_scale float32 scalar DECODE = 1 / input_global_scale (W4A4 only)
    """
    _check_writable(t)
    key = _keys(prefix, MODELOPT)
    out = {key["packed"]: np.asarray(t.packed).copy(),
           key["block_scale"]: np.asarray(t.block_scale).copy(),
           key["global_decode"]: np.array(t.global_decode, dtype=np.float32).reshape(())}
    if t.input_global_scale is not None:
        out[key["input_global_scale"]] = np.array(
            _exact_flip("input_global_scale", t.input_global_scale), dtype=np.float32).reshape(())
    return out


def _check_writable(t: NVFP4Tensor) -> None:
    """check_tensor, and what one checkpoint module holds: linear scales, one global scale."""
    check_tensor(t)
    if t.scale_layout != LINEAR:
        raise ValueError(f"NVFP4Tensor.scale_layout: {t.scale_layout!r}; checkpoints store LINEAR block scales "
                         f"(swizzling is a loader's step): unswizzle_scales first")
    if np.asarray(t.global_decode).size != 1:
        raise ValueError("NVFP4Tensor.global_decode: two values (a fused gate_up); a checkpoint stores gate_proj "
                         "and up_proj as separate modules, each with its own global scale: write the halves apart")


def from_compressed_tensors(tensors: Mapping[str, np.ndarray], prefix: str) -> NVFP4Tensor:
    """Read one module's compressed-tensors NVFP4 tensors (inverse of `to_compressed_tensors`).

    global_decode = float32 1 / weight_global_scale (what SGLang/vLLM store at load time).
    Raises ValueError naming the missing or mis-shaped tensor, NaN/inf/negative scales, a global scale of 0.
    """
    key = _keys(prefix, CT)
    packed, scale = _weight_pair(tensors, key["packed"], key["block_scale"])
    name = key["global_decode"]
    _check_global(name, _get(tensors, name))
    g_in = _optional_global(tensors, key["input_global_scale"])
    return NVFP4Tensor(packed, scale, np.float32(flip_global_scale(tensors[name]).reshape(())), g_in)


def from_modelopt(tensors: Mapping[str, np.ndarray], prefix: str) -> NVFP4Tensor:
    """Read one module's ModelOpt NVFP4 tensors (inverse of `to_modelopt`).

    global_decode = weight_scale_2 as stored; input_global_scale = float32 1 / input_scale when present.
    Raises ValueError naming the missing or mis-shaped tensor, NaN/inf/negative scales, a global scale of 0.
    """
    key = _keys(prefix, MODELOPT)
    packed, scale = _weight_pair(tensors, key["packed"], key["block_scale"])
    name = key["global_decode"]
    _check_global(name, _get(tensors, name))
    g_in = _optional_global(tensors, key["input_global_scale"])
    if g_in is not None:
        g_in = np.float32(flip_global_scale(g_in))
    return NVFP4Tensor(packed, scale, np.float32(np.asarray(tensors[name]).reshape(())), g_in)


def _get(tensors: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    if name not in tensors:
        raise ValueError(f"{name}: missing from the checkpoint")
    return np.asarray(tensors[name])


def _weight_pair(tensors, packed_name: str, scale_name: str):
    packed, scale = _get(tensors, packed_name), _get(tensors, scale_name)
    if packed.dtype != np.uint8 or packed.ndim != 2:
        raise ValueError(f"{packed_name}: expected uint8 [N, K/2], got {packed.dtype} {packed.shape}")
    N, K = packed.shape[0], 2 * packed.shape[1]
    _check_k(K, packed_name)
    _check_scales(scale_name, scale, (N, K // BLOCK))
    return packed.copy(), scale.copy()


def _optional_global(tensors, name: str) -> Optional[np.float32]:
    if name not in tensors:
        return None
    _check_global(name, tensors[name])
    return np.float32(np.asarray(tensors[name]).reshape(()))


# ----------------------------------------------------------------------------- MoE experts (A5, A6)


def expert_tensor(t: NVFP4Tensor, e: int) -> NVFP4Tensor:
    """Expert e of a stacked NVFP4Tensor, as the 2-D tensor `dequantize` takes (global_decode [E] or,
    for a fused gate_up, [E, 2] = (gate, up); the scale layout kept)."""
    g_in = None if t.input_global_scale is None else np.float32(np.asarray(t.input_global_scale)[e])
    g = np.asarray(t.global_decode, np.float32)[e]
    return NVFP4Tensor(np.asarray(t.packed)[e], np.asarray(t.block_scale)[e],
                       np.float32(g) if g.ndim == 0 else g.copy(), g_in, t.scale_layout)


def dequantize_experts(nv) -> tuple[np.ndarray, np.ndarray]:
    """(gate_up [E, 2I, D], down [E, D, I]) float64: the exact dequantization of every expert, each half
    of gate_up with its own global scale where global_decode is [E, 2], either scale layout."""
    nv = fused_experts(nv)
    E = int(np.asarray(nv.gate_up.packed).shape[0])
    for name, t, per in (("gate_up", nv.gate_up, ((E,), (E, 2))), ("down", nv.down, ((E,),))):
        shape = np.shape(t.global_decode)
        if shape not in per:
            raise ValueError(f"nvfp4.{name}.global_decode: shape {shape}, expected one of {list(per)} "
                             f"([E, 2] = gate's and up's DECODE scales)")
    return (np.stack([dequantize(expert_tensor(nv.gate_up, e)) for e in range(E)]),
            np.stack([dequantize(expert_tensor(nv.down, e)) for e in range(E)]))


def quantize_experts(gate_up, down) -> NVFP4Experts:
    """Quantize gate_up [E, 2I, D] and down [E, D, I] with one global scale per expert and projection,
    gate and up halves EACH from its own amax (global_decode [E, 2], what a checkpoint holds: gate_proj
    and up_proj are separate modules); no input scales (set them with `with_input_scales`)."""
    gate_up = np.asarray(gate_up)
    I = gate_up.shape[1] // 2

    def stacked(ws, halves: bool):
        qs = [[quantize(w[:I]), quantize(w[I:])] if halves else [quantize(w)] for w in ws]
        g = np.array([[q.global_decode for q in pair] for pair in qs], dtype=np.float32)
        return NVFP4Tensor(np.stack([np.concatenate([q.packed for q in pair]) for pair in qs]),
                           np.stack([np.concatenate([q.block_scale for q in pair]) for pair in qs]),
                           g if halves else g[:, 0])
    return NVFP4Experts(stacked(gate_up, True), stacked(np.asarray(down), False))


def swizzle_experts(nv: NVFP4Experts) -> NVFP4Experts:
    """nv with every expert's block scales [N, K/16] in the 128x4 swizzled layout ([E, Mp, Kp], each
    expert swizzled on its own, scale_layout "swizzled"), as a CUTLASS/FlashInfer loader leaves them."""
    def sw(t: NVFP4Tensor) -> NVFP4Tensor:
        if t.scale_layout == SWIZZLED:
            return t
        return t._replace(block_scale=np.stack([swizzle_scales(s) for s in np.asarray(t.block_scale)]),
                          scale_layout=SWIZZLED)
    return NVFP4Experts(sw(nv.gate_up), sw(nv.down))


def with_input_scales(nv: NVFP4Experts, gate_up_input, down_input) -> NVFP4Experts:
    """Static W4A4 input scales, ENCODE direction, one per expert ([E] each; None = dynamic, see
    `dynamic_input_scale`): gate_up_input quantizes x, down_input quantizes h (NVFP4.md A5, A6)."""
    def f(a):
        return None if a is None else _positive_finite("input_global_scale", np.atleast_1d(a)).astype(np.float32)
    return NVFP4Experts(nv.gate_up._replace(input_global_scale=f(gate_up_input)),
                        nv.down._replace(input_global_scale=f(down_input)))


def dynamic_input_scale(a) -> np.float32:
    """The ENCODE scale of an activation tensor taken at call time: 2688 / amax over ALL of `a` in float32.

    This is our convention when a checkpoint gives no input_global_scale: one value per GEMM input
    tensor (every token of x for gate_up; every routed (token, expert) row of h for down, shared by
    all experts), so a token's output depends on the batch it rides in (like any per-tensor dynamic
    scale). An all-zero tensor gets 1.0 (any value quantizes zeros to zeros).
    """
    amax = np.float32(np.abs(np.asarray(a, dtype=np.float32)).max(initial=0.0))
    return np.float32(global_scale_encode(amax)) if amax > 0 else np.float32(1.0)
