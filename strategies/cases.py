"""Drawn cases of the KDA checks: small NamedTuples of structure + seed, JSON-serialisable for repro."""
from __future__ import annotations

from typing import NamedTuple, Optional

from hypothesis import strategies as st

from strategies.geometry import DSAGeometry, KDAGeometry, dsa_geometries, kda_geometries
from strategies.sequences import chunk_splits, packed_lengths, sequence_lengths
from strategies.tensors import FAMILIES

SEEDS = st.integers(0, 2**32 - 1)


class CoreCase(NamedTuple):
    """The KDA core on [batch, length] rows, or (docs set) one packed row of documents."""

    heads: int
    head_dim: int
    batch: int
    length: int
    docs: Optional[tuple[int, ...]]
    initial_state: bool
    family: str
    seed: int


class SublayerCase(NamedTuple):
    """One token stream through the KDA sublayer, cut into calls by `splits`."""

    geometry: KDAGeometry
    batch: int
    length: int
    left_pad: tuple[int, ...]
    splits: tuple[int, ...]
    initial_state: bool
    family: str
    seed: int


class PackedCase(NamedTuple):
    """Documents run packed (cu_seqlens) vs alone; `poison` (doc index or None) gets a NaN state."""

    geometry: KDAGeometry
    docs: tuple[int, ...]
    poison: Optional[int]
    family: str
    seed: int


class DecodeCase(NamedTuple):
    """`steps` consecutive one-token decode calls per sequence from a non-zero state."""

    geometry: KDAGeometry
    batch: int
    steps: int
    family: str
    seed: int


def families() -> st.SearchStrategy[str]:
    return st.sampled_from(FAMILIES)


@st.composite
def core_cases(draw, base, *, max_len: int = 160, packed: Optional[bool] = None) -> CoreCase:
    g = draw(kda_geometries(base))
    use_docs = draw(st.booleans()) if packed is None else packed
    if use_docs:
        docs = draw(packed_lengths(max_len=max_len))
        batch, length = 1, sum(docs)
    else:
        docs, batch, length = None, draw(st.integers(1, 2)), draw(sequence_lengths(max_len=max_len))
    return CoreCase(g.heads, g.head_dim, batch, length, docs, draw(st.booleans()),
                    draw(families()), draw(SEEDS))


@st.composite
def sublayer_cases(draw, base, *, max_len: int = 140, padded: bool = True) -> SublayerCase:
    g = draw(kda_geometries(base))
    length = draw(sequence_lengths(max_len=max_len))
    batch = draw(st.integers(1, 2))
    pad = tuple(draw(st.integers(0, min(length - 1, 9))) if padded else 0 for _ in range(batch))
    splits = draw(chunk_splits(length))
    return SublayerCase(g, batch, length, pad, splits, draw(st.booleans()), draw(families()),
                        draw(SEEDS))


@st.composite
def packed_cases(draw, base, *, max_len: int = 140) -> PackedCase:
    g = draw(kda_geometries(base))
    docs = draw(packed_lengths(max_len=max_len))
    poison = draw(st.one_of(st.none(), st.integers(0, len(docs) - 1)))
    return PackedCase(g, docs, poison, draw(families()), draw(SEEDS))


@st.composite
def decode_cases(draw, base, *, max_steps: int = 6) -> DecodeCase:
    g = draw(kda_geometries(base))
    return DecodeCase(g, draw(st.integers(1, 3)), draw(st.integers(1, max_steps)), draw(families()),
                      draw(SEEDS))


class IndexCase(NamedTuple):
    """T cached tokens, the last `queries` of them querying (1 = a decode step after any prefix);
    `tie` = "exact" copies one pool's tokens into the next so their scores tie on purpose."""

    geometry: DSAGeometry
    batch: int
    length: int
    queries: int
    left_pad: tuple[int, ...]
    tie: str
    family: str
    seed: int


class MLACase(NamedTuple):
    """A full DSA layer then a shared one over one token stream, cut into calls by `splits`."""

    geometry: DSAGeometry
    batch: int
    length: int
    left_pad: tuple[int, ...]
    splits: tuple[int, ...]
    family: str
    seed: int


def dsa_lengths(g: DSAGeometry, *, max_len: int = 80) -> st.SearchStrategy[int]:
    """Pool-boundary lengths (every length up to 2·kpool + 1, around topk + kpool, 63..65), lengths
    past topk + kpool (the selection no longer covers the whole prefix: real top-k sparsity, where
    selections can go wrong), or the general boundary-biased lengths; a third each."""
    special = sorted({n for n in list(range(1, 2 * g.kpool + 2))
                      + [g.topk + g.kpool - 1, g.topk + g.kpool, g.topk + g.kpool + 1, 23, 63, 64, 65]
                      if 1 <= n <= max_len})
    general = sequence_lengths(max_len=max_len)
    sparse = st.integers(g.topk + g.kpool, max_len) if g.topk + g.kpool <= max_len else general
    return st.integers(0, 2).flatmap(lambda pick: (st.sampled_from(special), sparse, general)[pick])


@st.composite
def index_cases(draw, base, *, max_len: int = 80) -> IndexCase:
    g = draw(dsa_geometries(base))
    length = draw(dsa_lengths(g, max_len=max_len))
    queries = draw(st.sampled_from(sorted({1, length}))) if draw(st.booleans()) else \
        draw(st.integers(1, length))
    batch = draw(st.integers(1, 2))
    pad = tuple(draw(st.integers(0, min(length - 1, 9))) for _ in range(batch))
    return IndexCase(g, batch, length, queries, pad, draw(st.sampled_from(("none", "exact"))),
                     draw(st.sampled_from(("normal", "large"))), draw(SEEDS))


@st.composite
def mla_cases(draw, base, *, max_len: int = 70) -> MLACase:
    g = draw(dsa_geometries(base))
    length = draw(dsa_lengths(g, max_len=max_len))
    batch = draw(st.integers(1, 2))
    pad = tuple(draw(st.integers(0, min(length - 1, 9))) for _ in range(batch))
    return MLACase(g, batch, length, pad, draw(chunk_splits(length)), draw(st.sampled_from(("normal", "large"))),
                   draw(SEEDS))


# a selection wider than two kernel blocks of 64 rows: few query rows then split it across programs
# (flash-decoding) on a GPU; the tiny geometry's topk 8 never does
WIDE_TOPK, WIDE_KPOOL = 256, 4


@st.composite
def absorbed_cases(draw, base, *, max_len: int = 80) -> IndexCase:
    """index_cases, plus (a drawn boolean) a wide selection: topk 256 over up to ~300 cached tokens with
    1-2 decode queries, the shape whose selection a GPU splits across programs and merges."""
    if not draw(st.booleans()):
        return draw(index_cases(base, max_len=max_len))
    g = draw(dsa_geometries(base, vary=False))._replace(topk=WIDE_TOPK, kpool=WIDE_KPOOL)
    length = draw(st.integers(1, g.topk + g.kpool + 40))
    batch = draw(st.integers(1, 2))
    pad = tuple(draw(st.integers(0, min(length - 1, 9))) for _ in range(batch))
    return IndexCase(g, batch, length, draw(st.integers(1, min(2, length))), pad, "none",
                     draw(st.sampled_from(("normal", "large"))), draw(SEEDS))


class MHCCase(NamedTuple):
    """mHC on [batch, length] tokens of N streams of width D, with `iters` Sinkhorn iterations
    (few iterations make the row/column order observable, SPEC §13)."""

    streams: int
    hidden: int
    batch: int
    length: int
    iters: int
    family: str
    seed: int


@st.composite
def mhc_cases(draw, base) -> MHCCase:
    n = draw(st.sampled_from(sorted({base.hc_mult, 2, 4})))
    d = draw(st.sampled_from(sorted({base.hidden_size, 16, 48})))
    iters = draw(st.sampled_from(sorted({1, 3, base.hc_sinkhorn_iters})))
    return MHCCase(n, d, draw(st.integers(1, 2)), draw(st.integers(1, 9)), iters,
                   draw(st.sampled_from(("boosted", "normal"))), draw(SEEDS))


class MoECase(NamedTuple):
    """One MoE layer over `tokens` tokens; family "clamps" boosts weights so the +-10 SwiGLU clamps fire,
    "tied" gives two experts identical router rows (an exact router tie), "gates_off" puts every gate
    pre-activation (routed and shared) in [-20, -11] with up of order 1..10, where the output is all
    silu's far-negative tail (invariants/moe_checks.py: moe_inputs)."""

    hidden: int
    experts: int
    top_k: int
    groups: int
    topk_group: int
    inter: int
    tokens: int
    family: str
    seed: int


MOE_FAMILIES = ("normal", "clamps", "tied", "gates_off")


@st.composite
def moe_cases(draw, base) -> MoECase:
    E = base.n_routed_experts
    groups, topk_group = draw(st.sampled_from(sorted({(base.n_group, base.topk_group), (1, 1), (2, 1), (4, 2)})))
    if E % groups or E // groups < 2:
        groups, topk_group = 1, 1
    k = draw(st.integers(1, min(base.num_experts_per_tok + 1, topk_group * E // groups)))
    d = draw(st.sampled_from(sorted({base.hidden_size, 48})))
    return MoECase(d, E, k, groups, topk_group, base.moe_intermediate_size, draw(st.integers(1, 24)),
                   draw(st.sampled_from(MOE_FAMILIES)), draw(SEEDS))


class NVFP4Case(NamedTuple):
    """One [rows, cols] weight to quantize; families put values on the format's edges."""

    rows: int
    cols: int
    family: str
    seed: int


@st.composite
def nvfp4_cases(draw, base) -> NVFP4Case:
    return NVFP4Case(draw(st.sampled_from((1, 3, 128, 130))), 16 * draw(st.integers(1, 9)),
                     draw(st.sampled_from(("normal", "zero_blocks", "subnormal_scales", "ties"))), draw(SEEDS))


class QuantGateCase(NamedTuple):
    """One NVFP4 MoE layer read through a fixed vocabulary projection (invariants/quant_gate.py).

    The MoE fields are MoECase's (`moe_case` gives it back); input_scales "static" calibrates one W4A4
    input scale per expert on another batch, "dynamic" takes them from the activations at call time;
    family "outliers" scales some tokens x8 past the static calibration (448 clamp, ±6 saturation).
    """

    hidden: int
    experts: int
    top_k: int
    groups: int
    topk_group: int
    inter: int
    tokens: int
    family: str
    input_scales: str
    vocab: int
    seed: int

    def moe_case(self) -> MoECase:
        return MoECase(*self[:7], self.family if self.family in ("normal", "clamps") else "normal", self.seed)


@st.composite
def quant_gate_cases(draw, base) -> QuantGateCase:
    # its own families, not moe_cases': "tied" is the router's business, and under "gates_off" each
    # gate is ONE weight times x[:, 0] and the output ~e^gate, so the fp8 block scale's rounding of
    # that weight (up to ~6%, ~1 in a gate of -15) moves it up to ~2x: a quantization effect the
    # quantization_* bands (measured on ordinary weights) do not describe (W4A4 mean KL 1.5-1.9x its
    # bound there). moe.forward holds that family's kernels.
    m = draw(moe_cases(base))
    return QuantGateCase(*m[:7], draw(st.sampled_from(("normal", "clamps", "outliers"))),
                         draw(st.sampled_from(("dynamic", "static"))),
                         draw(st.sampled_from(sorted({base.vocab_size, 256}))), m.seed)


CASE_TYPES = {c.__name__: c for c in (CoreCase, SublayerCase, PackedCase, DecodeCase, IndexCase, MLACase,
                                      MHCCase, MoECase, NVFP4Case, QuantGateCase)}


def case_to_json(case) -> dict:
    d = {"type": type(case).__name__}
    for k, v in case._asdict().items():
        d[k] = v._asdict() if hasattr(v, "_asdict") else (list(v) if isinstance(v, tuple) else v)
    return d


def case_from_json(d: dict):
    """Inverse of case_to_json, with a clear error on an unknown type or field."""
    d = dict(d)
    name = d.pop("type", None)
    if name not in CASE_TYPES:
        raise ValueError(f"case type: expected one of {sorted(CASE_TYPES)}, got {name!r}")
    cls = CASE_TYPES[name]
    missing = set(cls._fields) - set(d)
    extra = set(d) - set(cls._fields)
    if missing or extra:
        raise ValueError(f"{name}: missing fields {sorted(missing)}, unexpected {sorted(extra)}")
    if "geometry" in d:
        geo = DSAGeometry if name in ("IndexCase", "MLACase") else KDAGeometry
        d["geometry"] = geo(**d["geometry"])
    for k, v in d.items():
        if isinstance(v, list):
            d[k] = tuple(v)
    return cls(**d)
