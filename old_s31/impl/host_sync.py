"""Host syncs on a code path, found WITHOUT a GPU: `record_host_syncs()` records every call that, on a
CUDA tensor, would read a device value back to the host (or wait for the device), with the project
line that made it.

Why: a CUDA-graph capture fails (cudaErrorStreamCaptureInvalidated) at the first such call, and on the
GPU it says only that; on the CPU the same calls run silently. Recorded here (on any device):

- a value to the host: Tensor.__bool__ / __int__ / __float__ / __index__ / item / tolist / numpy /
  __array__ / cpu, Tensor.to("cpu") (a literal device string: see _to_cpu), torch.equal / allclose / is_nonzero, repr / format;
- an output whose SHAPE depends on values (the device counts, the host waits): torch.nonzero /
  argwhere / masked_select / unique / unique_consecutive / bincount, one-argument torch.where,
  repeat_interleave with tensor repeats and no output_size, boolean-mask indexing (x[mask], x[mask] = v);
- a host -> device copy from host data (torch.tensor / as_tensor of non-tensor data, from_numpy: on
  CUDA a synchronous copy, illegal in a capture);
- explicit waits: torch.cuda.synchronize, Event / Stream .synchronize.

Calls made inside the Triton interpreter (frames in the triton package: how the CPU runs kernels; a
compiled kernel on the GPU makes none) and nested calls (one record per outermost call) are not
recorded. Each record is a `HostSync(what, where, stack)`: `where` the first frame outside torch and
this module ("impl/moe.py:123"), `stack` up to four such frames, innermost first.

    with record_host_syncs() as syncs:
        decoder_layer(lw, g, x1, m1, cache, prev)
    assert not syncs, syncs
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from typing import List, NamedTuple, Tuple

import torch

__all__ = ["HostSync", "record_host_syncs", "format_syncs"]


class HostSync(NamedTuple):
    what: str
    where: str
    stack: Tuple[str, ...]

    def __str__(self):
        return f"{self.where}: {self.what}  [{' <- '.join(self.stack[1:])}]" if len(self.stack) > 1 \
            else f"{self.where}: {self.what}"


_TORCH_DIR = os.path.dirname(torch.__file__)
_HERE = os.path.abspath(__file__)
_ROOT = os.path.dirname(os.path.dirname(_HERE))
_LOCAL = threading.local()


def _triton_dir():
    try:
        import triton
        return os.path.dirname(triton.__file__)
    except ImportError:            # pragma: no cover
        return None


def _short(path: str) -> str:
    path = os.path.abspath(path)
    return os.path.relpath(path, _ROOT) if path.startswith(_ROOT + os.sep) else path


def _stack(triton_dir):
    """Frames outside torch and this module (innermost first), or None inside the Triton interpreter."""
    out, f = [], sys._getframe(2)
    while f is not None:
        fn = f.f_code.co_filename
        if triton_dir and fn.startswith(triton_dir):
            return None
        if not (fn.startswith(_TORCH_DIR) or os.path.abspath(fn) == _HERE or fn.startswith("<")):
            out.append(f"{_short(fn)}:{f.f_lineno}")
        f = f.f_back
    return out


def _bool_index(idx) -> bool:
    items = idx if isinstance(idx, tuple) else (idx,)
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in items)


def _to_cpu(args, kwargs) -> bool:
    # only a literal "cpu": on the CPU every torch.device taken from another tensor is cpu too (x.to(
    # device=y.device) is no copy on CUDA), so a device OBJECT naming the CPU is not told apart here
    dev = kwargs.get("device", args[0] if args else None)
    return isinstance(dev, str) and dev.startswith("cpu")


# (owner, name, what, predicate(args, kwargs) -> record?)   (args exclude nothing: self is args[0])
def _always(args, kwargs):
    return True


def _host_data(args, kwargs):
    data = args[0] if args else kwargs.get("data")
    return not isinstance(data, torch.Tensor)


_PATCHES = [
    (torch.Tensor, "__bool__", "Tensor.__bool__ (a tensor in a Python condition)", _always),
    (torch.Tensor, "__int__", "int(tensor)", _always),
    (torch.Tensor, "__float__", "float(tensor)", _always),
    (torch.Tensor, "__index__", "Tensor.__index__ (a tensor as a Python index / size)", _always),
    (torch.Tensor, "item", "Tensor.item()", _always),
    (torch.Tensor, "tolist", "Tensor.tolist()", _always),
    (torch.Tensor, "numpy", "Tensor.numpy()", _always),
    (torch.Tensor, "__array__", "np.asarray(tensor)", _always),
    (torch.Tensor, "cpu", "Tensor.cpu()", _always),
    (torch.Tensor, "to", "Tensor.to(cpu)", lambda a, k: _to_cpu(a[1:], k)),
    (torch.Tensor, "__repr__", "repr(tensor)", _always),
    (torch.Tensor, "__format__", "format(tensor)", _always),
    (torch.Tensor, "nonzero", "Tensor.nonzero()", _always),
    (torch.Tensor, "masked_select", "Tensor.masked_select()", _always),
    (torch.Tensor, "unique", "Tensor.unique()", _always),
    (torch.Tensor, "bincount", "Tensor.bincount()", _always),
    (torch.Tensor, "repeat_interleave", "Tensor.repeat_interleave(tensor repeats) without output_size",
     lambda a, k: len(a) > 1 and isinstance(a[1], torch.Tensor) and k.get("output_size") is None),
    (torch.Tensor, "equal", "Tensor.equal()", _always),
    (torch.Tensor, "__getitem__", "boolean-mask indexing x[mask]", lambda a, k: _bool_index(a[1])),
    (torch.Tensor, "__setitem__", "boolean-mask assignment x[mask] = v", lambda a, k: _bool_index(a[1])),
    (torch, "nonzero", "torch.nonzero", _always),
    (torch, "argwhere", "torch.argwhere", _always),
    (torch, "masked_select", "torch.masked_select", _always),
    (torch, "unique", "torch.unique", _always),
    (torch, "unique_consecutive", "torch.unique_consecutive", _always),
    (torch, "bincount", "torch.bincount", _always),
    (torch, "repeat_interleave", "torch.repeat_interleave(tensor repeats) without output_size",
     lambda a, k: len(a) > 1 and isinstance(a[1], torch.Tensor) and k.get("output_size") is None),
    (torch, "where", "torch.where(cond) (one argument)", lambda a, k: len(a) + len(k) == 1),
    (torch, "equal", "torch.equal", _always),
    (torch, "allclose", "torch.allclose", _always),
    (torch, "is_nonzero", "torch.is_nonzero", _always),
    (torch, "tensor", "torch.tensor(host data) (host -> device copy)", _host_data),
    (torch, "as_tensor", "torch.as_tensor(host data) (host -> device copy)", _host_data),
    (torch, "from_numpy", "torch.from_numpy (host -> device copy when moved)", _always),
    (torch.cuda, "synchronize", "torch.cuda.synchronize", _always),
    (torch.cuda.Event, "synchronize", "Event.synchronize", _always),
    (torch.cuda.Stream, "synchronize", "Stream.synchronize", _always),
]


def _wrap(orig, what, pred, log, triton_dir):
    @functools.wraps(orig)
    def wrapper(*args, **kwargs):
        if getattr(_LOCAL, "depth", 0) == 0:
            _LOCAL.depth = 1
            try:
                if pred(args, kwargs):
                    st = _stack(triton_dir)
                    if st:
                        log.append(HostSync(what, st[0], tuple(st[:4])))
            finally:
                _LOCAL.depth = 0
        _LOCAL.depth = getattr(_LOCAL, "depth", 0) + 1
        try:
            return orig(*args, **kwargs)
        finally:
            _LOCAL.depth -= 1
    return wrapper


@contextlib.contextmanager
def record_host_syncs():
    """Patch the calls listed in the module docstring for the block; yields the list of HostSync
    records (filled as the block runs). Not reentrant; one thread."""
    log: List[HostSync] = []
    triton_dir = _triton_dir()
    saved = []
    try:
        for owner, name, what, pred in _PATCHES:
            orig = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name)
            if orig is None:
                orig = getattr(owner, name)
            saved.append((owner, name, owner.__dict__.get(name, None) if isinstance(owner, type) else orig))
            setattr(owner, name, _wrap(getattr(owner, name), what, pred, log, triton_dir))
        yield log
    finally:
        for owner, name, orig in reversed(saved):
            if orig is None:
                delattr(owner, name)
            else:
                setattr(owner, name, orig)


def format_syncs(syncs) -> str:
    """One line per distinct (where, what), with its count, in first-seen order."""
    seen = {}
    for s in syncs:
        seen.setdefault((s.where, s.what), [0, s])[0] += 1
    return "\n".join(f"{n:4d}x {s}" for n, s in seen.values())


# aten ops that launch no device kernel (views, metadata, shape queries)
_NO_KERNEL = ("view", "_unsafe_view", "reshape", "expand", "permute", "transpose", "t", "unsqueeze", "squeeze",
              "select", "slice", "as_strided", "alias", "detach", "split", "split_with_sizes", "unbind",
              "chunk", "narrow", "diagonal", "unfold", "lift_fresh", "empty", "empty_like", "empty_strided",
              "_to_copy_noop", "is_nonzero", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
              "_reshape_alias", "view_as", "expand_as", "movedim", "swapaxes", "_local_scalar_dense")


@contextlib.contextmanager
def count_launches():
    """Count the device kernels a block would launch: {"triton": n, "torch": n, "torch_ops": {op: n}}.

    Triton launches through impl.launches (each launch of an impl/kernels kernel); torch ops through a
    TorchDispatchMode, every aten op but views and metadata (_NO_KERNEL), those made inside the Triton
    interpreter left out. An estimate of the CUDA launches: on CUDA a `.to` that changes nothing or a
    `contiguous` of a contiguous tensor launches nothing, and a few aten ops launch two kernels."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from impl import launches
    triton_dir = _triton_dir()
    out = {"triton": 0, "torch": 0, "torch_ops": {}, "triton_kernels": {}}

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name not in _NO_KERNEL and _stack(triton_dir) is not None:
                out["torch"] += 1
                out["torch_ops"][name] = out["torch_ops"].get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    def watch(name, _args):
        out["triton"] += 1
        out["triton_kernels"][name] = out["triton_kernels"].get(name, 0) + 1

    with launches.watching(watch), Mode():
        yield out
