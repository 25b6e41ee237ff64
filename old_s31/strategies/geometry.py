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


# False pins every drawn dimension to the base geometry's (`glmgate gate --fixed-shapes`: one shape per
# mechanism, for a candidate that compiles or autotunes per shape); read when a check's strategy is built
VARY_SHAPES = True


def _vary(vary: Optional[bool]) -> bool:
    return VARY_SHAPES if vary is None else vary


def _kda_choices(g0: KDAGeometry) -> tuple[list[int], list[int]]:
    """(heads, head dims) drawn around the base: a single head, an odd count, tile and non-tile dims."""
    return sorted({g0.heads, 1, 3}), sorted({g0.head_dim, 16, 32})


def kda_variations(base, *, vary: Optional[bool] = None) -> list[KDAGeometry]:
    """Every KDA geometry `kda_geometries` draws (heads-major), or only the base one when not varying.

    Variations keep CPU cost low (heads <= 4, head dim <= 32) but cover a single head, an odd
    head count and head dims that are and are not a tensor-core tile (8, 16, 32).
    """
    g0 = KDAGeometry.from_geometry(base)
    if not _vary(vary):
        return [g0]
    heads, dims = _kda_choices(g0)
    return [g0._replace(heads=h, head_dim=d) for h in heads for d in dims]


def kda_geometries(base, *, vary: Optional[bool] = None) -> st.SearchStrategy[KDAGeometry]:
    """The base geometry's KDA dims, or (when `vary`, default VARY_SHAPES) one of `kda_variations`."""
    g0 = KDAGeometry.from_geometry(base)
    if not _vary(vary):
        return st.just(g0)
    heads, dims = _kda_choices(g0)
    return st.builds(
        KDAGeometry,
        heads=st.sampled_from(heads),
        head_dim=st.sampled_from(dims),
        hidden=st.just(g0.hidden),
        conv_width=st.just(g0.conv_width),
        lower_bound=st.just(g0.lower_bound),
    )


class DSAGeometry(NamedTuple):
    """The dimensions of one MLA + DSA check (SPEC §1): hidden D, MLA heads H, nope / value dims,
    q / kv latent ranks, indexer heads and head dim, topk and kpool."""

    hidden: int
    heads: int
    nope_dim: int
    v_dim: int
    q_rank: int
    kv_rank: int
    index_heads: int
    index_dim: int
    topk: int
    kpool: int

    @classmethod
    def from_geometry(cls, g) -> "DSAGeometry":
        return cls(g.hidden_size, g.num_attention_heads, g.qk_nope_head_dim, g.v_head_dim, g.q_lora_rank,
                   g.kv_lora_rank, g.index_n_heads, g.index_head_dim, g.index_topk, g.index_kpool)

    @property
    def slots(self) -> int:
        return self.topk + self.kpool - 1


# a selection narrower than this many slots fits one block of the sparse MLA kernel on the interpreter
# (16 slots, impl/mla.py): such a base also draws topk doubled, whose selections span two blocks
NARROW_SELECTION = 32


def dsa_geometries(base, *, vary: Optional[bool] = None) -> st.SearchStrategy[DSAGeometry]:
    """The base geometry's DSA dims, or (when `vary`, default VARY_SHAPES) pool sizes around it (every
    divisor of topk up to 8: kpool 1 has no tail, kpool = topk picks one pool) and, for a narrow
    selection (the tiny preset's topk 8), topk doubled: the online softmax then sees a second block."""
    g0 = DSAGeometry.from_geometry(base)
    if not _vary(vary):
        return st.just(g0)
    # the base pool size first: shrinking moves towards the checkpoint's kpool, not towards kpool 1
    kpools = [g0.kpool] + [p for p in (2, 8, 1) if p != g0.kpool and g0.topk % p == 0]
    topks = [g0.topk] + ([2 * g0.topk] if g0.slots < NARROW_SELECTION else [])
    return st.tuples(st.sampled_from(kpools), st.sampled_from(topks)).map(
        lambda pt: g0._replace(kpool=pt[0], topk=pt[1]))
