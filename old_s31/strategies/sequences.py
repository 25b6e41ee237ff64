"""Sequence structure: lengths, chunk splits, packed documents, a row among companions (STYLE 10-11).

Everything here draws STRUCTURE (integers and tuples), never tensor elements, so a failure shrinks to
e.g. `length=65, splits=(64, 1)`. Boundary-biased picks sit behind a drawn choice the shrinker can
drop (a boolean, or the later branch of a one_of), and splits are drawn as part lengths (a shorter part is a simpler case), not cut positions.
Every draw's range is fixed (never a function of an earlier draw: a length, a batch size), and values
that must fit are cut to fit afterwards: the shrinker can then shorten a stream or drop a row without
turning the draws after it into different, unrelated ones (which stalls it on big cases).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from hypothesis import strategies as st

# lengths around every boundary the kernels care about: tiny, kpool=4 pools, the 16-token
# sub-chunk, the 64-token chunk and two chunks
BOUNDARY_LENGTHS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 63, 64, 65, 127, 128, 129)


def _check_range(min_len, max_len):
    for name, v in (("min_len", min_len), ("max_len", max_len)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{name}: expected a non-negative int, got {v!r}")
    if min_len > max_len:
        raise ValueError(f"min_len={min_len} > max_len={max_len}")


def sequence_lengths(*, min_len: int = 1, max_len: int = 160) -> st.SearchStrategy[int]:
    """Lengths in [min_len, max_len], half the time one of BOUNDARY_LENGTHS."""
    _check_range(min_len, max_len)
    boundary = [n for n in BOUNDARY_LENGTHS if min_len <= n <= max_len]
    uniform = st.integers(min_len, max_len)
    if not boundary:
        return uniform
    return st.booleans().flatmap(lambda pick: st.sampled_from(boundary) if pick else uniform)


# the resolution of a cut drawn as a fraction of the tokens left
_FRACTION = 1 << 16


# what a cut is: a boundary part length, or (simpler: first) the fraction of the tokens left that stays
# after it. Neither range depends on the stream's length, so shrinking the length (or an earlier part)
# keeps every later draw meaningful
_CUTS = st.one_of(st.tuples(st.just("fraction"), st.integers(0, _FRACTION - 1)),
                  st.tuples(st.just("boundary"), st.sampled_from(BOUNDARY_LENGTHS)))


@st.composite
def chunk_splits(draw, total: int, *, max_parts: int = 6) -> tuple[int, ...]:
    """Part lengths (each >= 1) summing to `total`: how a prefill is cut into calls.

    Designed to shrink (STYLE 11): a list of up to max_parts - 1 cuts, each a boundary part (1, 63, 64,
    65, ...) or a fraction of the tokens left, drawn whatever `total` is, so the shrinker drops cuts
    (towards one call) or shortens the stream (the parts scale down with it and stay valid) without
    turning the draws after them into other ones. A fraction shrinks towards a part that leaves ONE
    token after it: a 1-token tail is a boundary case of its own, and the paths decode the tokens
    after the first part one call each, so the cheapest cut is also the simplest. A cut that does not
    fit what is left is skipped; the last part is what remains.
    """
    if not isinstance(total, int) or isinstance(total, bool) or total < 1:
        raise ValueError(f"total: expected a positive int, got {total!r}")
    if max_parts < 1:
        raise ValueError(f"max_parts: expected >= 1, got {max_parts}")
    parts, left = [], total
    for kind, v in draw(st.lists(_CUTS, max_size=max_parts - 1)):
        n = v if kind == "boundary" else left - 1 - v * (left - 1) // _FRACTION
        if 1 <= n < left:
            parts.append(n)
            left -= n
    return tuple(parts) + (left,)


@st.composite
def left_pads(draw, batch: int, length: int, *, max_pad: int = 9) -> tuple[int, ...]:
    """Left padding of each of `batch` rows of `length` tokens, each drawn in [0, max_pad] whatever the
    length is and cut to length - 1 (a row keeps at least one real token). The LAST row's pad is drawn
    first and the others' after it: dropping rows drops trailing draws only, and a failure that needs
    one padded row keeps its pad when the batch shrinks. Draw it last in a case (nothing after it then
    moves when the batch shrinks)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch: expected a positive int, got {batch!r}")
    last = draw(st.integers(0, max_pad))
    pads = [draw(st.integers(0, max_pad)) for _ in range(batch - 1)] + [last]
    return tuple(min(p, length - 1) for p in pads)


@st.composite
def packed_lengths(draw, *, max_docs: int = 4, max_len: int = 140) -> tuple[int, ...]:
    """Document lengths of one varlen batch: zero-length and 1-token rows included on purpose."""
    if max_docs < 1:
        raise ValueError(f"max_docs: expected >= 1, got {max_docs}")
    n = draw(st.integers(1, max_docs))
    docs = tuple(draw(st.one_of(sequence_lengths(min_len=1, max_len=max_len), st.just(0)))
                 for _ in range(n))
    if sum(docs) == 0:
        docs = docs[:-1] + (1,)
    return docs


def cu_seqlens(lengths) -> list[int]:
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


class Placement(NamedTuple):
    """A row of interest among companion rows (batch invariance: the row alone vs placed there).

    lengths[i] is row i's length (tokens, documents' lengths, cached tokens: each mechanism says);
    the row of interest is row `at`, every other row a companion."""

    lengths: tuple[int, ...]
    at: int


@st.composite
def placements(draw, row_lengths: st.SearchStrategy[int], *,
               companion_lengths: Optional[st.SearchStrategy[int]] = None, max_rows: int = 4) -> Placement:
    """The row of interest's length from `row_lengths`, 1 to max_rows - 1 companions around it (lengths
    from `companion_lengths`; None: each as long as the row, for layouts without padding), at a drawn
    position. Shrinks towards one companion after the row (at 0) and short rows."""
    if not isinstance(row_lengths, st.SearchStrategy):
        raise ValueError(f"row_lengths: expected a strategy of ints, got {row_lengths!r}")
    if companion_lengths is not None and not isinstance(companion_lengths, st.SearchStrategy):
        raise ValueError(f"companion_lengths: expected a strategy of ints or None, got {companion_lengths!r}")
    if not isinstance(max_rows, int) or isinstance(max_rows, bool) or max_rows < 2:
        raise ValueError(f"max_rows: expected an int >= 2 (the row and a companion), got {max_rows!r}")
    n = draw(row_lengths)
    others = [draw(companion_lengths) if companion_lengths is not None else n
              for _ in range(draw(st.integers(1, max_rows - 1)))]
    at = draw(st.integers(0, len(others)))
    return Placement(tuple(others[:at] + [n] + others[at:]), at)
