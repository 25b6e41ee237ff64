"""NVFP4 in plain torch: the "torch" baseline of oracle/nvfp4.py (NVFP4.md A1-A6), torch tensors in/out.

Letters: N rows (output features), K reduction dim, K/16 block scales per row, M / Kb the rows / columns
of a scale matrix, Mp / Kp padded to 128 / 4 (swizzle).

Same names, argument order and recipe as `oracle.nvfp4`: codes uint8, block scales
torch.float8_e4m3fn, global scales float32 (0-dim tensors). The quantizer runs in float32 exactly as
the oracle's (s_b = fp8(min(G · (amax_b / 6), 448)), v = (x · G) / s_b, ties to the even code), so
codes and scales are bit-identical to the oracle's. `dequantize` returns float32 by default,
computed as (e2m1 · scale) · global_decode: e2m1 · scale is exact in float32 and the one rounding
is the oracle's float64 result cast to float32, so it is bit-exact against `oracle.nvfp4.dequantize`
cast to float32 (and exact in float64 with dtype=torch.float64).

`TorchNVFP4` is split into small overridable pieces (`_magnitude_code`, `unpack`, `_decode_scale`,
`_half_scales`, `_linear_scales`, `_expert_linear_scales`) because the planted bugs of impl/mutants/
override exactly one of them.

Stacked experts (`dequantize` with leading axes): a fused gate_up's global_decode [..., 2] is (gate,
up), the gate's value scaling rows 0..N/2-1 and the up's the rest; block scales in either
NVFP4Tensor.scale_layout ("swizzled": [..., Mp, Kp], each expert's matrix swizzled on its own).
`nvfp4 = TorchNVFP4()` and the module-level aliases let this module be used like `oracle.nvfp4`.
"""
from __future__ import annotations

import torch

from oracle.types import NVFP4Tensor

E2M1_MAX, FP8_MAX, BLOCK = 6.0, 448.0, 16
FP8 = torch.float8_e4m3fn
GLOBAL_NUMERATOR = E2M1_MAX * FP8_MAX                           # 2688, exact in float32
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# midpoints between E2M1 neighbours and whether a tie there rounds up (to the even code)
_BOUNDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_TIE_UP = (False, True, False, True, False, True, False)
TILE_ROWS, TILE_COLS = 128, 4


def _f32(a, device=None) -> torch.Tensor:
    if not isinstance(a, torch.Tensor):
        a = torch.as_tensor(a)
    return a.to(device=device if device is not None else a.device, dtype=torch.float32)


def _check_k(K: int, name: str) -> None:
    if K % BLOCK:
        raise ValueError(f"{name}: K={K} is not a multiple of {BLOCK} (one FP8 scale per 16 elements along K)")


def _positive_finite(name: str, a) -> torch.Tensor:
    a = _f32(a)
    if not torch.isfinite(a).all():
        raise ValueError(f"{name}: {a.tolist()}, expected finite values")
    if (a <= 0).any():
        raise ValueError(f"{name}: {a.tolist()}, expected > 0 (a zero amax or scale has no global scale)")
    return a


def _codes(codes, name: str) -> torch.Tensor:
    if codes.dtype.is_floating_point or codes.dtype == torch.bool:
        raise ValueError(f"{name}: expected an integer tensor of 4-bit codes, got dtype {codes.dtype}")
    if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) > 15):
        raise ValueError(f"{name}: expected codes in 0..15, found [{int(codes.min())}, {int(codes.max())}]")
    return codes.to(torch.uint8)


def _padded(M: int, Kb: int) -> tuple[int, int]:
    return -(-M // TILE_ROWS) * TILE_ROWS, -(-Kb // TILE_COLS) * TILE_COLS


def _halves(g: torch.Tensor, lead: tuple) -> bool:
    """Is global_decode `g` a fused gate_up's (gate, up) pair per expert ([..., 2] over leading axes `lead`)?"""
    return tuple(g.shape) == (*lead, 2) and tuple(g.shape) != (1,)


class TorchNVFP4:
    """Plain-torch NVFP4; every public method matches the oracle.nvfp4 function of the same name."""

    # bitwise batch invariance (impl.registry.batch_invariant): elementwise but for each 16-element
    # block's max, which no order of evaluation changes
    BATCH_INVARIANT = ("qdq_activation",)

    # ------------------------------------------------------------------------- elements (E2M1)

    def _magnitude_code(self, mag):
        """|v| -> magnitude code 0..7: the A3 threshold table, ties to the even code."""
        code = torch.zeros(mag.shape, dtype=torch.uint8, device=mag.device)
        for b, up in zip(_BOUNDS, _TIE_UP):
            code += (mag >= b if up else mag > b).to(torch.uint8)
        return code

    def quantize_e2m1(self, v):
        """oracle.nvfp4.quantize_e2m1: nearest E2M1, ties to even, saturating; uint8 codes 0..15."""
        if torch.isnan(v).any():
            raise ValueError("v: contains NaN, expected finite or ±inf values to quantize")
        code = self._magnitude_code(v.abs())
        return code | ((v < 0) & (code > 0)).to(torch.uint8) * 8

    def dequantize_e2m1(self, codes, dtype=torch.float32):
        """oracle.nvfp4.dequantize_e2m1: E2M1[code & 7], negated when bit 3 is set."""
        codes = _codes(codes, "codes").long()
        table = torch.tensor(E2M1, dtype=dtype, device=codes.device)
        return torch.where((codes & 8) != 0, -1.0, 1.0).to(dtype) * table[codes & 7]

    # ------------------------------------------------------------------------- packing (A4)

    def pack(self, codes):
        """oracle.nvfp4.pack: codes [..., K] -> uint8 [..., K/2], element 2j in the LOW nibble."""
        codes = _codes(codes, "codes")
        if codes.ndim < 1 or codes.shape[-1] % 2:
            raise ValueError(f"codes: expected an even last axis K, got shape {tuple(codes.shape)}")
        return codes[..., 0::2] | (codes[..., 1::2] << 4)

    def unpack(self, packed):
        """oracle.nvfp4.unpack: uint8 [..., K/2] -> codes [..., K], low nibble first."""
        if packed.dtype != torch.uint8:
            raise ValueError(f"packed: expected uint8, got dtype {packed.dtype}")
        out = torch.stack([packed & 0xF, packed >> 4], dim=-1)
        return out.reshape(*packed.shape[:-1], 2 * packed.shape[-1])

    # ------------------------------------------------------------------------- global scales (A2)

    def global_scale_encode(self, amax):
        """G = 2688 / amax in float32 (encode direction)."""
        a = _positive_finite("amax", amax)
        return torch.full_like(a, GLOBAL_NUMERATOR) / a      # not 2688 / a: torch computes that as a^-1 · 2688

    def global_scale_decode(self, amax):
        """g = amax / 2688 in float32 (decode direction)."""
        return _positive_finite("amax", amax) / GLOBAL_NUMERATOR

    def flip_global_scale(self, scale):
        """encode <-> decode: the float32 reciprocal."""
        s = _positive_finite("scale", scale)
        return torch.ones_like(s) / s

    def _decode_scale(self, t: NVFP4Tensor):
        """The float32 factor that multiplies e2m1 · block scale: the tensor's DECODE global scale."""
        return _f32(t.global_decode)

    def _half_scales(self, g):
        """A fused gate_up's [..., 2] DECODE scales -> the (gate, up) factors of its two row halves."""
        return g

    # ------------------------------------------------------------------------- quantizer (A3)

    def _quantize_blocks(self, x32, G):
        """float32 [..., K] with ENCODE scale G -> (codes uint8 [..., K], scales fp8 [..., K/16])."""
        # K/16 spelled out: -1 cannot be inferred for zero rows (an expert no token was routed to)
        blocks = x32.reshape(*x32.shape[:-1], x32.shape[-1] // BLOCK, BLOCK)         # [..., K/16, 16]
        amax_b = blocks.abs().amax(dim=-1)                                          # [..., K/16]
        raw = torch.clamp_max(G * (amax_b / E2M1_MAX), FP8_MAX)
        scales = raw.to(FP8)
        s = scales.float()[..., None]
        v = torch.where(s > 0, (blocks * G) / torch.where(s > 0, s, 1.0), 0.0)
        codes = self.quantize_e2m1(v.clamp(-E2M1_MAX, E2M1_MAX))
        return codes.reshape(x32.shape), scales

    def quantize(self, w, global_scale=None) -> NVFP4Tensor:
        """oracle.nvfp4.quantize: w [N, K] -> NVFP4Tensor(packed, fp8 scales, float32 0-dim global_decode)."""
        w32 = _f32(w)
        if w32.ndim != 2:
            raise ValueError(f"w: expected [N, K], got shape {tuple(w32.shape)}")
        _check_k(w32.shape[1], "w")
        if not torch.isfinite(w32).all():
            raise ValueError("w: contains NaN or inf (in float32), expected finite weights")
        amax = w32.abs().max() if w32.numel() else w32.new_zeros(())
        G = self.global_scale_encode(amax) if global_scale is None \
            else _positive_finite("global_scale", global_scale).to(w32.device)
        codes, scales = self._quantize_blocks(w32, G.reshape(()))
        return NVFP4Tensor(self.pack(codes), scales, self.flip_global_scale(G).reshape(()))

    def dequantize(self, t: NVFP4Tensor, dtype=torch.float32):
        """oracle.nvfp4.dequantize: (e2m1 · block scale) · global_decode, [..., N, K] in `dtype`.

        Leading axes are allowed (stacked experts [E, N, K/2] with global_decode [E]).
        """
        self.check_tensor(t)
        lead, N = tuple(t.packed.shape[:-2]), int(t.packed.shape[-2])
        scale = t.block_scale
        if t.scale_layout == "swizzled":
            scale = self._expert_linear_scales(scale, (N, int(t.packed.shape[-1]) * 2 // BLOCK))
        vals = self.dequantize_e2m1(self.unpack(t.packed), dtype) * scale.to(dtype).repeat_interleave(BLOCK, dim=-1)
        g = self._decode_scale(t).to(dtype)
        if _halves(g, lead):                            # (gate, up): one factor per row half
            g = self._half_scales(g).repeat_interleave(N // 2, dim=-1)            # [..., N]
            return vals * g[..., None]
        return vals * g.reshape(*g.shape, *([1] * (vals.ndim - g.ndim)))

    def qdq_activation(self, x, input_global_scale):
        """oracle.nvfp4.qdq_activation: per-row, per-16 quant-dequant with a static ENCODE scale (A6)."""
        x32 = _f32(x)
        _check_k(x32.shape[-1] if x32.ndim else 1, "x")
        if not torch.isfinite(x32).all():
            raise ValueError("x: contains NaN or inf (in float32), expected finite activations")
        G = _positive_finite("input_global_scale", input_global_scale).to(x32.device).reshape(())
        codes, scales = self._quantize_blocks(x32, G)
        acc = torch.float64 if isinstance(x, torch.Tensor) and x.dtype == torch.float64 else torch.float32
        s = scales.to(acc).repeat_interleave(BLOCK, dim=-1)
        return self.dequantize_e2m1(codes, acc) * s / G.to(acc)

    # ------------------------------------------------------------------------- validation

    def check_tensor(self, t: NVFP4Tensor, name: str = "NVFP4Tensor") -> None:
        """Dtypes, shapes ([..., N, K/2] uint8, [..., N, K/16] fp8) and finite positive scales."""
        if not isinstance(t, NVFP4Tensor):
            raise ValueError(f"t: expected an NVFP4Tensor, got {type(t).__name__}")
        p, s = t.packed, t.block_scale
        if p.dtype != torch.uint8 or p.ndim < 2:
            raise ValueError(f"{name}.packed: expected uint8 [..., N, K/2], got {p.dtype} {tuple(p.shape)}")
        K = 2 * int(p.shape[-1])
        _check_k(K, f"{name}.packed")
        if t.scale_layout not in ("linear", "swizzled"):
            raise ValueError(f"{name}.scale_layout: {t.scale_layout!r}, expected 'linear' or 'swizzled'")
        swz = t.scale_layout == "swizzled"
        want = (*p.shape[:-2], *_padded(int(p.shape[-2]), K // BLOCK)) if swz else (*p.shape[:-1], K // BLOCK)
        if s.dtype != FP8:
            raise ValueError(f"{name}.block_scale: expected float8_e4m3fn, got dtype {s.dtype}")
        if tuple(s.shape) != want:
            what = "[..., Mp, Kp] (swizzled: N, K/16 padded to 128, 4)" if swz else "[..., N, K/16]"
            raise ValueError(f"{name}.block_scale: expected shape {what} = {want}, got {tuple(s.shape)}")
        f = s.float()
        if torch.isnan(f).any():
            raise ValueError(f"{name}.block_scale: contains NaN (an E4M3 scale cast without the 448 clamp?)")
        if (f < 0).any():
            raise ValueError(f"{name}.block_scale: contains negative scales, expected >= 0 (UE4M3)")
        g = torch.as_tensor(t.global_decode)
        lead = tuple(p.shape[:-2])
        if g.dtype != torch.float32 or tuple(g.shape) not in ((), (1,), lead, (*lead, 2)):
            raise ValueError(f"{name}.global_decode: expected float32 of shape (), {lead} or {(*lead, 2)} "
                             f"(gate, up), got {g.dtype} {tuple(g.shape)}")
        if _halves(g, lead) and int(p.shape[-2]) % 2:
            raise ValueError(f"{name}.global_decode: two values (gate, up) for an odd N={int(p.shape[-2])}")
        if not torch.isfinite(g).all() or (g <= 0).any():
            raise ValueError(f"{name}.global_decode: {g.tolist()}, expected finite values > 0 (0 makes "
                             f"1/0 = inf and inf · 0 = NaN; a BF16 module put in an NVFP4 slot has 0 there)")

    # ------------------------------------------------------------------------- swizzled scales (A5)

    def swizzle_scales(self, s):
        """oracle.nvfp4.swizzle_scales: linear [M, Kb] -> the 128x4 swizzled [Mp, Kp] (zero padded)."""
        if s.ndim != 2:
            raise ValueError(f"s: expected [M, K/16], got shape {tuple(s.shape)}")
        M, Kb = s.shape
        Mp, Kp = _padded(M, Kb)
        padded = torch.zeros(Mp, Kp, dtype=s.dtype, device=s.device)
        padded[:M, :Kb] = s
        tiles = padded.reshape(Mp // TILE_ROWS, 4, 32, Kp // TILE_COLS, TILE_COLS)
        return tiles.permute(0, 3, 2, 1, 4).contiguous().reshape(Mp, Kp)

    def unswizzle_scales(self, sw, shape):
        """oracle.nvfp4.unswizzle_scales: [Mp, Kp] swizzled -> linear [M, Kb] = shape."""
        M, Kb = (int(d) for d in shape)
        Mp, Kp = _padded(M, Kb)
        if sw.numel() != Mp * Kp:
            raise ValueError(f"sw: expected {Mp}·{Kp} = {Mp * Kp} elements (shape {tuple(shape)} padded to "
                             f"128x4), got shape {tuple(sw.shape)}")
        tiles = sw.reshape(Mp // TILE_ROWS, Kp // TILE_COLS, 32, 4, TILE_COLS)
        return tiles.permute(0, 3, 2, 1, 4).contiguous().reshape(Mp, Kp)[:M, :Kb]

    def _linear_scales(self, sw, shape):
        """The linear [M, Kb] scales a loader reads from a swizzled buffer: unswizzle it."""
        return self.unswizzle_scales(sw, shape)

    def _expert_linear_scales(self, sw, shape):
        """Stacked experts' swizzled scales [..., Mp, Kp] -> linear [..., M, Kb]: each expert unswizzled."""
        flat = sw.reshape(-1, *sw.shape[-2:])
        lin = [self.unswizzle_scales(a, shape) for a in flat]
        return torch.stack(lin).reshape(*sw.shape[:-2], *shape) if lin else sw.new_zeros(*sw.shape[:-2], *shape)

    def swizzle_experts(self, nv):
        """oracle.nvfp4.swizzle_experts: every expert's block scales in the 128x4 swizzled layout."""
        def sw(t):
            if t.scale_layout == "swizzled":
                return t
            s = torch.stack([self.swizzle_scales(a) for a in t.block_scale])
            return t._replace(block_scale=s, scale_layout="swizzled")
        return type(nv)(sw(nv.gate_up), sw(nv.down))

    def dequantize_swizzled(self, packed, swizzled_scale, global_decode, dtype=torch.float32):
        """dequantize a weight whose block scales are stored in the 128x4 swizzled layout (loader path)."""
        N, K = int(packed.shape[0]), 2 * int(packed.shape[1])
        _check_k(K, "packed")
        return self.dequantize(NVFP4Tensor(packed, self._linear_scales(swizzled_scale, (N, K // BLOCK)),
                                           global_decode), dtype)


nvfp4 = TorchNVFP4()


def __getattr__(name: str):
    # the module's functions are the namespace's methods (PEP 562): `from impl.baseline.nvfp4 import x`
    return getattr(nvfp4, name)
