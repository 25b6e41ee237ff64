"""The Triton interpreter (TRITON_INTERPRET=1, how CI runs every kernel) without its per-call re-patching.

Why: the interpreter swaps triton.language's builtins for NumPy ones when a kernel launches, and then
AGAIN on every call of a nested @triton.jit function inside it: `tl.sum`, `tl.max`, `tl.sigmoid`,
`tl.cdiv` are such functions. Each re-patch walks the language modules (~1 ms), so a kernel with a
reduction in a loop (mHC's Sinkhorn iterations, KDA's chunk loop) spends about half its interpreted time
re-applying patches that are already in place (measured: a model.paths example 12.4 s -> 6.3 s).

What `install` changes: within one kernel launch, a nested call whose language modules were already
patched in that launch skips the repeat. Every launch still patches from scratch (the set of patched
modules is forgotten whenever the interpreter restores a launch's patches), so the code that runs, and
every number it computes, is the interpreter's own: tests/test_interpreter.py checks the kernels'
outputs bitwise against the unpatched interpreter.

It touches two private names of triton.runtime.interpreter (`_patch_lang`, `_LangPatchScope.restore`);
`install` returns False, changing nothing, on a triton without them (the kernels then run as fast as the
interpreter alone runs them). Nothing here runs on a GPU: compiled kernels never enter the interpreter.
"""
from __future__ import annotations

import warnings

_STATE = {"installed": False, "real_calls": 0, "skipped_calls": 0}


def available() -> bool:
    """True when this triton's interpreter has the two names `install` wraps."""
    try:
        import triton.runtime.interpreter as ti
    except ImportError:
        return False
    return callable(getattr(ti, "_patch_lang", None)) and callable(
        getattr(getattr(ti, "_LangPatchScope", None), "restore", None))


def install() -> bool:
    """Wrap the interpreter's patching once per process; True when it is (or already was) in place."""
    if _STATE["installed"]:
        return True
    if not available():
        return False
    import triton.language as tl
    import triton.runtime.interpreter as ti

    real_patch, real_restore = ti._patch_lang, ti._LangPatchScope.restore
    patched = set()        # the language-module sets patched since the last restore

    def modules_of(fn) -> frozenset:
        # the same modules the interpreter patches for fn: triton.language / triton.language.core in
        # the function's globals
        return frozenset(id(v) for v in fn.__globals__.values() if v is tl or v is tl.core)

    def patch_lang(fn):
        key = modules_of(fn)
        if key in patched:
            _STATE["skipped_calls"] += 1
            return ti._LangPatchScope()        # nothing changed, nothing to restore
        _STATE["real_calls"] += 1
        scope = real_patch(fn)
        patched.add(key)
        return scope

    def restore(self):
        # a launch ends (or a scope is undone): what was patched may no longer be, so the next call
        # patches for real
        patched.clear()
        real_restore(self)

    ti._patch_lang = patch_lang
    ti._LangPatchScope.restore = restore
    _STATE.update(installed=True, real=(real_patch, real_restore))
    return True


def uninstall() -> None:
    """Put the interpreter's own functions back (tests compare both)."""
    if not _STATE["installed"]:
        return
    import triton.runtime.interpreter as ti
    ti._patch_lang, ti._LangPatchScope.restore = _STATE.pop("real")
    _STATE["installed"] = False


def counts() -> dict:
    """{"real_calls", "skipped_calls"}: how many patch requests ran and how many were repeats skipped."""
    return {k: _STATE[k] for k in ("real_calls", "skipped_calls")}


def quiet_discarded_lanes() -> None:
    """Ignore the NumPy RuntimeWarnings raised inside triton's modules, in this process.

    The interpreter runs both sides of every tl.where in NumPy, so a lane the kernel then discards
    still warns: a DSA pool's empty slots give -inf - -inf, a sigmoid of a large negative overflows
    its exp. A compiled kernel computes the same lanes silently. A non-finite value that reaches an
    output still fails that output's check, so the warnings add nothing to the report. Filters are
    per process: the CLI calls this, and so does each spawned rank (impl/sharded_pool.py).
    """
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.")
