"""Watching kernel launches: which Triton kernel of impl/kernels/ ran, with which arguments.

Why: a branch of a kernel that no drawn case reaches is untested, however many examples pass (a second
selection block of the online softmax, a second K tile, a split-KV combine). invariants/kernel_paths.py
declares every code path of every kernel with the predicate over a launch's arguments that says it ran;
this module hands each launch's arguments to whoever watches (`watching`), and does nothing otherwise.

How: Triton's own pre-run hook (`add_pre_run_hook`, on the interpreter's and the compiler's kernel
objects alike), registered once per kernel the first time something watches; it is called with the
launch's arguments before the kernel runs. Unwatched, a launch pays one Python call and one list test.
Nothing is changed in the launch itself. On the interpreter the hook sees the host copies of the
tensors the kernel will read; on a GPU the device tensors (a watcher that reads them syncs).
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
from typing import Callable, Iterator

# the modules of impl/kernels/ (each holds only @triton.jit code)
KERNEL_MODULES = ("kda", "dsa", "mla", "mhc", "moe", "paged", "norm")
_WATCHERS: list[Callable[[str, dict], None]] = []
_HOOKED: set[int] = set()


def kernels() -> dict[str, object]:
    """Every launchable kernel of impl/kernels/ by name: the @triton.jit objects named `*_kernel`
    (device functions, called from inside kernels, start with `_` and are never launched)."""
    out = {}
    for mod in KERNEL_MODULES:
        m = importlib.import_module(f"impl.kernels.{mod}")
        for name, obj in vars(m).items():
            if name.endswith("_kernel") and not name.startswith("_") and hasattr(obj, "fn"):
                out[name] = obj
    return out


def parameters(kernel) -> tuple[str, ...]:
    """A kernel's parameter names, in order."""
    return tuple(inspect.signature(kernel.fn).parameters)


def constexprs(kernel) -> tuple[str, ...]:
    """The parameters of a kernel annotated `tl.constexpr` (the ones that can choose code at compile time)."""
    import triton.language as tl

    return tuple(n for n, p in inspect.signature(kernel.fn).parameters.items()
                 if p.annotation is tl.constexpr or p.annotation in ("tl.constexpr", "constexpr"))


def _hook(name: str, names: tuple[str, ...]):
    def hook(*args, **kwargs):
        if not _WATCHERS:
            return
        bound = dict(zip(names, args))
        bound.update((k, v) for k, v in kwargs.items() if k in names)
        for watcher in list(_WATCHERS):
            watcher(name, bound)
    return hook


def _install() -> None:
    """Register the hook on every kernel once (a kernel object keeps its hooks for the process)."""
    for name, k in kernels().items():
        if id(k) in _HOOKED:
            continue
        if not callable(getattr(k, "add_pre_run_hook", None)):
            raise RuntimeError(f"{name}: this triton's kernels take no pre-run hook (add_pre_run_hook), so "
                               f"launches cannot be watched; kernel paths need triton >= 3.3")
        k.add_pre_run_hook(_hook(name, parameters(k)))
        _HOOKED.add(id(k))


@contextlib.contextmanager
def watching(on_launch: Callable[[str, dict], None]) -> Iterator[None]:
    """Within the block, `on_launch(kernel name, {parameter: argument})` runs before every launch of a
    kernel of impl/kernels/ (constexprs and launch options included; grid and num_warps are not
    arguments). Watchers nest; an exception from one propagates out of the launch."""
    _install()
    _WATCHERS.append(on_launch)
    try:
        yield
    finally:
        _WATCHERS.remove(on_launch)
