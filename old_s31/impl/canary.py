"""Sentinel margins around buffers a kernel writes: an out-of-bounds write changes a margin.

Why: a Triton kernel whose store mask is off by one writes past its output; on a GPU that lands silently
in whatever the allocator put next. A buffer allocated here is the middle of a larger one whose MARGIN
elements on each side hold a sentinel (NaN for floats: a stray READ then poisons the outputs too), and
`margin_written` says whether anything touched them.

Two users: the harness (invariants/integrity.py) hands a candidate's in-place state over this way, and our
host wrappers allocate their outputs with `empty` and check them with `verify` after the launch when
GLMGATE_CANARY=1 (off by default: the margins cost an allocation and a scan per call).
"""
from __future__ import annotations

import os
from typing import NamedTuple, Optional

import torch

ENV = "GLMGATE_CANARY"
# elements of sentinel on each side: a row's worth at the tiny geometries, so an off-by-one and a whole
# stray row both land inside it
MARGIN = 256
# the integer view of each element size: bitwise comparison, NaN equal to itself
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class Canary(NamedTuple):
    original: Optional[torch.Tensor]   # the caller's buffer the view stands in for (None: a fresh output)
    view: torch.Tensor                 # what the kernel writes: the middle of `buffer`
    buffer: torch.Tensor               # MARGIN sentinel elements, the view's, MARGIN more


def enabled() -> bool:
    """GLMGATE_CANARY=1: our wrappers allocate their outputs inside sentinel margins and verify them."""
    return os.environ.get(ENV) == "1"


def bits(t: torch.Tensor) -> torch.Tensor:
    """A floating tensor as integers of its element size (others as they are): compared bitwise."""
    return t.view(BITS[t.element_size()]) if t.dtype.is_floating_point else t


def sentinel(dtype: torch.dtype):
    """NaN where the dtype has one, else its most negative value (True for bool)."""
    if dtype.is_floating_point:
        return float("nan")
    return True if dtype == torch.bool else torch.iinfo(dtype).min


def guarded(shape, dtype: torch.dtype, device, original: Optional[torch.Tensor] = None) -> Canary:
    """A contiguous `shape` buffer inside sentinel margins, holding a copy of `original` if given."""
    n = 1
    for s in shape:
        n *= int(s)
    buf = torch.full((2 * MARGIN + n,), sentinel(dtype), dtype=dtype, device=device)
    view = buf[MARGIN:MARGIN + n].view(tuple(shape))
    if original is not None:
        view.copy_(original)
    return Canary(original, view, buf)


def margin_written(c: Canary) -> Optional[str]:
    """None when both margins still hold the sentinel, else how many elements were written and where."""
    ref = bits(torch.full((MARGIN,), sentinel(c.buffer.dtype), dtype=c.buffer.dtype, device=c.buffer.device))
    n = c.view.numel()
    for side, part, offset in (("before the start", c.buffer[:MARGIN], -MARGIN),
                               ("past the end", c.buffer[MARGIN + n:], n)):
        diff = bits(part) != ref
        if bool(diff.any()):
            return (f"{int(diff.sum())} element(s) written {side} of its {tuple(c.view.shape)} buffer, first at "
                    f"flat offset {int(torch.nonzero(diff)[0]) + offset}")
    return None


def empty(*shape, dtype: torch.dtype, device) -> torch.Tensor:
    """torch.empty, or under GLMGATE_CANARY=1 a view inside sentinel margins (`verify` checks them)."""
    if not enabled():
        return torch.empty(*shape, dtype=dtype, device=device)
    c = guarded(shape, dtype, device)
    c.view._glmgate_canary = c          # the margins travel with the view until `verify`
    return c.view


def verify(kernel: str, **outputs: torch.Tensor) -> None:
    """Under GLMGATE_CANARY=1: RuntimeError naming the kernel and output whose margin was written."""
    if not enabled():
        return
    for name, t in outputs.items():
        c = getattr(t, "_glmgate_canary", None)
        where = None if c is None else margin_written(c)
        if where:
            raise RuntimeError(f"{kernel} wrote outside its output {name}: {where} ({ENV}=1)")
