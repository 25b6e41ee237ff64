"""Geometries: the per-mechanism dimensions drawn around a base `Geometry` (default: the tiny preset)."""
from __future__ import annotations

from typing import NamedTuple, Optional

from hypothesis import strategies as st


class KDAGeometry(NamedTuple):
    """The dimensions one KDA check needs: H heads, K = V head dim, D hidden, W conv width."""

    heads: int
    head_dim: int
    hidden: int
    conv_width: int
    lower_bound: Optional[float]

    @classmethod
    def from_geometry(cls, g) -> "KDAGeometry":
        return cls(g.linear_num_heads, g.linear_head_dim, g.hidden_size,
                   g.linear_conv_kernel_dim, g.linear_lower_bound)


def kda_geometries(base, *, vary: bool = True) -> st.SearchStrategy[KDAGeometry]:
    """The base geometry's KDA dims, or (when `vary`) small variations around them.

    Variations keep CPU cost low (heads <= 4, head dim <= 32) but cover a single head, an odd
    head count and head dims that are and are not a tensor-core tile (8, 16, 32).
    """
    g0 = KDAGeometry.from_geometry(base)
    if not vary:
        return st.just(g0)
    return st.builds(
        KDAGeometry,
        heads=st.sampled_from(sorted({g0.heads, 1, 3})),
        head_dim=st.sampled_from(sorted({g0.head_dim, 16, 32})),
        hidden=st.just(g0.hidden),
        conv_width=st.just(g0.conv_width),
        lower_bound=st.just(g0.lower_bound),
    )
