"""My NVFP4 quantize / dequantize / dequantize_swizzled, from docs/candidates.md section 8."""
import torch
from oracle.types import NVFP4Tensor

FP8 = torch.float8_e4m3fn
BLOCK = 16
GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
MIDS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])


def _codes_rne(x):
    """|x| (float32, already clipped to 6) -> magnitude code 0..7, ties to the even code."""
    mids = MIDS.to(x.device)
    above = (x[..., None] > mids).sum(-1)
    tie_up = ((x[..., None] == mids) & (torch.arange(1, 8, device=x.device) % 2 == 0)).sum(-1)
    return above + tie_up


def _codes_half_up(x):
    """bug variant: ties always round up (round-half-up)."""
    return (x[..., None] >= MIDS.to(x.device)).sum(-1)


def _quantize(w, global_scale, rounder, high_first=False):
    w = w.float()
    if w.ndim != 2 or w.shape[1] % BLOCK:
        raise ValueError(f"w: expected [N, K] with K a multiple of 16, got shape {tuple(w.shape)}")
    N, K = w.shape
    if global_scale is None:
        G = torch.tensor(2688.0, dtype=torch.float32, device=w.device) / w.abs().max()
    else:
        G = torch.as_tensor(global_scale, dtype=torch.float32, device=w.device).reshape(())
    blocks = w.reshape(N, K // BLOCK, BLOCK)
    amax_b = blocks.abs().amax(-1)                                    # [N, K/16]
    s = torch.clamp(G * amax_b / 6, max=448.0)
    s = torch.where(amax_b == 0, torch.zeros_like(s), s).to(FP8)
    sf = s.float()[..., None]
    scaled = (blocks * G) / torch.where(sf == 0, torch.ones_like(sf), sf)
    mag = torch.clamp(scaled.abs(), max=6.0)
    code = rounder(mag)
    # a negative value that rounds to zero is +0 (code 0), not -0 (code 8): found by probing the gate
    code = torch.where((scaled < 0) & (code > 0), code + 8, code)
    code = torch.where(sf.expand_as(code) == 0, torch.zeros_like(code), code)
    code = code.reshape(N, K).to(torch.uint8)
    lo, hi = code[:, 0::2], code[:, 1::2]
    packed = (lo << 4) | hi if high_first else lo | (hi << 4)
    decode = torch.ones((), dtype=torch.float32, device=w.device) / G
    return NVFP4Tensor(packed.to(torch.uint8), s, decode)


def _e2m1(packed, high_first=False):
    lo, hi = packed & 0xF, packed >> 4
    if high_first:
        lo, hi = hi, lo
    codes = torch.stack([lo, hi], dim=-1).flatten(-2).long()         # [..., K]
    mag = GRID.to(packed.device)[codes & 7]
    return torch.where(codes >= 8, -mag, mag)


def _dequant(packed, scale, global_decode, dtype, high_first=False):
    vals = _e2m1(packed, high_first)                                  # [..., N, K]
    sc = scale.float().repeat_interleave(BLOCK, dim=-1)               # [..., N, K]
    gd = torch.as_tensor(global_decode).float().to(packed.device)
    gd = gd.reshape(gd.shape + (1, 1))
    return ((vals * sc) * gd).to(dtype)


def _unswizzle(sw, N, Kb):
    Mp, Kp = sw.shape
    m = torch.arange(N, device=sw.device)[:, None]
    k = torch.arange(Kb, device=sw.device)[None, :]
    idx = ((m // 128 * (Kp // 4) + k // 4) * 32 + m % 32) * 16 + ((m // 32) % 4) * 4 + k % 4
    return sw.reshape(-1)[idx.reshape(-1)].reshape(N, Kb)


class NVFP4:
    @staticmethod
    def quantize(w, global_scale=None):
        return _quantize(w, global_scale, _codes_rne)

    @staticmethod
    def dequantize(t, dtype=torch.float32):
        return _dequant(t.packed, t.block_scale, t.global_decode, dtype)

    @staticmethod
    def dequantize_swizzled(packed, swizzled_scale, global_decode, dtype=torch.float32):
        if swizzled_scale.dtype != FP8:
            raise ValueError(f"swizzled_scale: expected {FP8}, got {swizzled_scale.dtype}")
        N, K = packed.shape[0], packed.shape[1] * 2
        lin = _unswizzle(swizzled_scale, N, K // BLOCK)
        return _dequant(packed, lin, global_decode, dtype)


class Candidate:
    nvfp4 = NVFP4


# ---- buggy copies ----
class NVFP4HalfUp(NVFP4):
    @staticmethod
    def quantize(w, global_scale=None):
        return _quantize(w, global_scale, _codes_half_up)


class BugHalfUp:
    nvfp4 = NVFP4HalfUp


class NVFP4HighFirst:
    """bug: element 2j in the HIGH nibble, consistently in quantize and both dequantizers
    (round-trips fine on its own output)."""
    @staticmethod
    def quantize(w, global_scale=None):
        return _quantize(w, global_scale, _codes_rne, high_first=True)

    @staticmethod
    def dequantize(t, dtype=torch.float32):
        return _dequant(t.packed, t.block_scale, t.global_decode, dtype, high_first=True)

    @staticmethod
    def dequantize_swizzled(packed, swizzled_scale, global_decode, dtype=torch.float32):
        N, K = packed.shape[0], packed.shape[1] * 2
        lin = _unswizzle(swizzled_scale, N, K // BLOCK)
        return _dequant(packed, lin, global_decode, dtype, high_first=True)


class BugHighFirst:
    nvfp4 = NVFP4HighFirst


# ---- partial: quantize only ----
class NVFP4QuantOnly:
    quantize = staticmethod(NVFP4.quantize)


class PartialQuant:
    nvfp4 = NVFP4QuantOnly


# ---- workaround for nvfp4.gate: leave dequantize_swizzled out so the namespace is partial and the
# fallback supplies qdq_activation / global_scale_encode (undocumented functions) ----
class NVFP4NoSwizzled:
    quantize = staticmethod(NVFP4.quantize)
    dequantize = staticmethod(NVFP4.dequantize)


class NoSwizzled:
    nvfp4 = NVFP4NoSwizzled
