"""A partial candidate over two mechanisms: one object, an attribute per mechanism, each a few functions.

  kda  `decode` only, from a decode kernel that keeps its state in other layouts: the recurrent state
       V-first [B, H, V, K] (ours is [B, H, K, V]: rows are key channels) and the conv window
       token-major [B, W, C] (ours is channel-major [B, C, W]); the wrapper transposes in and out
  mhc  `expand` and `reduce` only (the model's two ends: N copies of the embedding, the mean over the
       streams); no unit check calls them, so mhc.coefficients and mhc.write_back are NOT COVERED
       for this candidate: only model.paths and serving.state_machine (the whole decoder) reach them

Everything else is our Triton implementation; the checks of dsa, mla, moe and nvfp4 are NOT RUN.

Gate it from this directory:  glmgate gate --candidate partial_two_mechanisms:Candidate
"""
from __future__ import annotations

from impl.baseline.kda import kda as _baseline
from oracle.types import KDAState


def decode_v_first(w, z, f, b, recurrent_vk, conv_wc):
    """The stand-in decode kernel (our baseline underneath). z [B, C], f [B, H·K], b [B, H],
    recurrent_vk [B, H, V, K] float32, conv_wc [B, W, C] -> (o [B, H, V], recurrent_vk, conv_wc)."""
    o, s = _baseline.decode(w, z, f, b, KDAState(recurrent_vk.transpose(-1, -2), conv_wc.transpose(-1, -2)))
    return o, s.recurrent.transpose(-1, -2).contiguous(), s.conv.transpose(-1, -2).contiguous()


class KDA:
    @staticmethod
    def decode(w, z, f, b, state):
        """impl.kda.decode: z [B, C] (C = 3·H·K), f [B, H·K] float32, b [B, H], state KDAState
        (recurrent [B, H, K, V] float32, conv [B, C, W]) -> (o [B, H, V] in z's dtype, KDAState).
        impl.kda.decode's other arguments (inplace, launch options) are ours: no check passes them."""
        o, rec, conv = decode_v_first(w, z, f, b, state.recurrent.transpose(-1, -2), state.conv.transpose(-1, -2))
        return o, KDAState(rec.transpose(-1, -2), conv.transpose(-1, -2))


class MHC:
    @staticmethod
    def expand(e, N):
        """impl.mhc.expand: e [B, S, D] -> [B, S, N, D], N copies (contiguous)."""
        if not isinstance(N, int) or isinstance(N, bool) or N < 1:
            raise ValueError(f"N: expected a positive int, got {N!r}")
        return e[..., None, :].expand(*e.shape[:-1], N, e.shape[-1]).contiguous()

    @staticmethod
    def reduce(X):
        """impl.mhc.reduce: X [B, S, N, D] -> [B, S, D], the plain mean over the streams."""
        if X.ndim != 4:
            raise ValueError(f"X: expected [B, S, N, D], got shape {tuple(X.shape)}")
        return X.mean(dim=-2)


class Candidate:
    kda = KDA
    mhc = MHC
