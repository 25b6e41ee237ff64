"""Input mutation and out-of-bounds writes around every call the harness makes into a candidate
(issue 13 item 10).

Why: a function that returns the right numbers but writes one of its inputs (a fused kernel reusing
its input as scratch, an in-place activation) corrupts whatever its caller still holds: the next layer's
residual, a prefix cache shared by forked requests. No output comparison sees it. And a kernel whose
tail mask is off by one writes past the buffer it was handed; on a GPU that silently lands in a
neighbour's memory.

So the recording proxies (invariants/coverage.py) run every protocol function through `guarded_call`:

- every torch tensor among its arguments (inside NamedTuples, dataclasses such as the weight containers
  of oracle/types.py, tuples, lists, dicts) is copied before the call and compared bitwise after; a
  changed one is a violation naming the function, the argument path and the elements that changed;
- an argument the protocol declares written in place (impl.registry.IN_PLACE, e.g. kda.decode's state
  with inplace=True) is exempt from that, and is instead handed over as a view into a larger buffer whose
  margins hold a NaN sentinel: a write past either end changes a margin (a violation), a read past them
  brings NaN into the outputs. The caller's own buffers then receive what was written into the views.

The engine turns each example's violations into verdicts of the exact quantities `inputs_unchanged`
and `in_bounds` of the called function (contracts.d), so they show in reports like any broken contract.
Copies cost little at the tiny geometries the checks draw (NOTES.md, issue 13: the measured overhead).
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable, Iterator, NamedTuple, Optional

import torch

from impl.canary import bits, guarded, margin_written

# containers are walked this deep (a weight container inside a layer inside the decoder's weights)
_DEPTH = 6


# tensors of at most this many elements are copied and compared element by element (every tensor of
# the tiny geometries); larger ones by checksum
COPY_LIMIT = 1 << 24


class Checksum(NamedTuple):
    shape: tuple
    value: int


class Violation(NamedTuple):
    function: str      # "moe.forward"
    quantity: str      # "inputs_unchanged" | "in_bounds"
    message: str


def tensors(obj: Any, path: str, depth: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    """(path, tensor) for every torch tensor inside `obj`: "routing.weights", "w.q_proj", "xs[1]"."""
    if isinstance(obj, torch.Tensor):
        yield path, obj
        return
    if depth >= _DEPTH or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
        return
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        items = zip(obj._fields, obj)
        fmt = "{}.{}"
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        items = ((f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj))
        fmt = "{}.{}"
    elif isinstance(obj, (tuple, list)):
        items, fmt = enumerate(obj), "{}[{}]"
    elif isinstance(obj, dict):
        items, fmt = obj.items(), "{}[{!r}]"
    else:
        return
    for k, v in items:
        yield from tensors(v, fmt.format(path, k), depth + 1)


def snapshot(t: torch.Tensor):
    """What `changed` compares against: a copy, or for a tensor too large to copy a checksum (full-size
    weights on a GPU: copying every expert of a decoder per call would double its memory)."""
    return t.clone() if t.numel() <= COPY_LIMIT else Checksum(tuple(t.shape), checksum(t))


def checksum(t: torch.Tensor) -> int:
    """A position-weighted sum of `t`'s bits, in slices (one int64 slice at a time in memory)."""
    flat, total = bits(t.detach()).reshape(-1), 0
    for i in range(0, flat.numel(), COPY_LIMIT):
        part = flat[i:i + COPY_LIMIT].to(torch.int64)
        weight = torch.arange(i, i + part.numel(), device=part.device, dtype=torch.int64) % 65521 + 1
        total += int((part * weight).sum()) + int(part.sum())
    return total


def changed(before, after: torch.Tensor) -> Optional[str]:
    """None when bitwise equal, else "3 of 16 elements changed, first at (0, 1)"."""
    if isinstance(before, Checksum):
        if before.shape != tuple(after.shape) or before.value != checksum(after):
            return f"its checksum changed ({after.numel()} elements: too many to copy and locate)"
        return None
    if before.shape != after.shape:
        return f"its shape changed from {tuple(before.shape)} to {tuple(after.shape)}"
    diff = bits(before) != bits(after)
    n = int(diff.sum())
    if n == 0:
        return None
    first = tuple(int(i) for i in torch.nonzero(diff)[0].tolist())
    return f"{n} of {before.numel()} elements changed, first at {first}"


@functools.lru_cache(maxsize=None)
def _signature(fn: Callable) -> Optional[inspect.Signature]:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def bound_arguments(fn: Callable, args: tuple, kwargs: dict) -> dict:
    """{parameter name: value} as the call binds them (positional "arg0", ... where it cannot bind)."""
    sig = _signature(fn)
    try:
        if sig is not None:
            return dict(sig.bind_partial(*args, **kwargs).arguments)
    except TypeError:
        pass            # the call does not fit: the function itself will say so
    return {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}


def written_in_place(name: str, bound: dict) -> tuple[str, ...]:
    """The arguments this call is declared to write (impl.registry.IN_PLACE), empty for most calls."""
    from impl.registry import IN_PLACE
    arg, flag = IN_PLACE.get(name, (None, None))
    return (arg,) if arg is not None and bound.get(flag) is True and bound.get(arg) is not None else ()


# ------------------------------------------------------------------------------------ canaries


def _swap(obj: Any, swap: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`obj` with each tensor replaced by swap(tensor), its containers rebuilt."""
    if isinstance(obj, torch.Tensor):
        return swap(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_swap(v, swap) for v in obj))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: _swap(getattr(obj, f.name), swap)
                                           for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, (tuple, list)):
        return type(obj)(_swap(v, swap) for v in obj)
    return obj


# ------------------------------------------------------------------------------------ the call


def guarded_call(name: str, fn: Callable, args: tuple, kwargs: dict, recorder):
    """fn(*args, **kwargs), the quantities it was judged on added to recorder.guarded and each violation
    of the input and in-place rules to recorder.violations (invariants/coverage.py Recorder)."""
    report = recorder.violations.append
    bound = bound_arguments(fn, args, kwargs)
    in_place = written_in_place(name, bound) if _binds(fn, bound) else ()
    before = [(p, t, snapshot(t)) for p, t in _unique(
        (p, t) for arg, v in bound.items() if arg not in in_place for p, t in tensors(v, arg))]
    shielded = {id(t): (p, guarded(t.shape, t.dtype, t.device, t))
                for arg in in_place for p, t in _unique(tensors(bound[arg], arg))}
    recorder.guarded.add((name, "inputs_unchanged"))
    if shielded:
        recorder.guarded.add((name, "in_bounds"))
        for arg in in_place:
            bound[arg] = _swap(bound[arg], lambda t: shielded[id(t)][1].view)
        out = fn(**bound)
    else:
        out = fn(*args, **kwargs)
    for path, t, copy in before:
        what = changed(copy, t)
        if what:
            report(Violation(name, "inputs_unchanged", f"{name} wrote its input {path}: {what}"))
    for path, c in shielded.values():
        where = margin_written(c)
        if where:
            report(Violation(name, "in_bounds", f"{name} wrote outside its in-place {path}: {where}"))
        c.original.copy_(c.view)      # the caller's buffer is the one declared written
    # "the same buffers when inplace": hand back the caller's own tensors, not the shielded views
    views = {id(c.view): c.original for _p, c in shielded.values()}
    return _swap(out, lambda t: views.get(id(t), t)) if views else out


def _binds(fn: Callable, bound: dict) -> bool:
    # calling by keyword (the shielded in-place arguments) is safe only when every bound name is one
    sig = _signature(fn)
    if sig is None:
        return False
    params = sig.parameters
    return all(k in params and params[k].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                  inspect.Parameter.KEYWORD_ONLY) for k in bound)


def _unique(pairs) -> list:
    """Each tensor once (one input can sit in two containers), first path kept."""
    seen, out = set(), []
    for p, t in pairs:
        if id(t) not in seen:
            seen.add(id(t))
            out.append((p, t))
    return out


# ------------------------------------------------------------------------------------ the verdicts


def verdicts(recorder, dtype: str) -> list:
    """One example's verdicts: per guarded (function, quantity) an exact verdict of that function's
    mechanism (contracts.d: "moe.forward.inputs_unchanged"), broken where a violation was reported."""
    from invariants.contracts import Verdict, lookup

    guarded, violations = recorder.take()
    said: dict = {}
    for v in violations:
        said.setdefault((v.function, v.quantity), []).append(v.message)
    out = []
    for name, quantity in sorted(guarded):
        mech, fn = name.split(".", 1)
        msgs = said.get((name, quantity), [])
        ok = "no input written" if quantity == "inputs_unchanged" else "the sentinel margins untouched"
        more = f" (and {len(msgs) - 3} more)" if len(msgs) > 3 else ""
        out.append(Verdict(lookup(mech, fn, quantity, "exact"), dtype, float("inf") if msgs else 0.0, 0.0,
                           None, None, "; ".join(msgs[:3]) + more if msgs else ok))
    return out
