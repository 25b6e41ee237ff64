"""Which of the candidate's functions a check actually called: a check that called none is `not covered`,
never `pass`.

Why: a check runs the candidate through its namespaces (`impl.kda.chunked`, `impl.mla.sublayer`, ...) and
the decoder composition over them. If none of the candidate's functions ran (the path the check drives
does not reach the candidate, or the candidate provides nothing there), a green row would claim a test
that never happened. The engine (invariants/engine.py) wraps the candidate's namespaces in recording
proxies for the duration of one check and reports the functions that ran.
"""
from __future__ import annotations

import functools
import time
from typing import Any

# the bundle's fields that hold a namespace of functions (serving holds an engine class: its
# construction is recorded as "serving.<class name>")
NAMESPACES = ("kda", "dsa", "mla", "mhc", "moe", "nvfp4", "model")


class Recorder:
    """The set of "mechanism.function" names called through the proxies handed out by `recording`, and
    the wall time spent inside them (outermost calls only: a model port calling the candidate's own
    kernels is counted once), so a report can show a slow candidate."""

    def __init__(self):
        self.called: set[str] = set()
        self.example: set[str] = set()     # those called since the engine last cleared it (one example)
        self.seconds = 0.0
        self.depth = 0
        # since the last `take`: the protocol functions whose inputs were guarded, and what they broke
        # (invariants/integrity.py); the engine turns them into each example's verdicts
        self.guarded: set[tuple[str, str]] = set()   # (function, quantity)
        self.violations: list = []

    def record(self, name: str) -> None:
        self.called.add(name)
        self.example.add(name)

    def take(self) -> tuple[set, list]:
        """((function, quantity) judged, violations) since the last take, cleared (one example's worth)."""
        out = (self.guarded, self.violations)
        self.guarded, self.violations = set(), []
        return out


class RecordingNamespace:
    """A namespace whose public callables record their name before running; everything else passes
    through unchanged (constants, private helpers)."""

    def __init__(self, ns: Any, mechanism: str, recorder: Recorder):
        object.__setattr__(self, "_ns", ns)
        object.__setattr__(self, "_mechanism", mechanism)
        object.__setattr__(self, "_recorder", recorder)
        object.__setattr__(self, "_siblings", {})

    def __getattr__(self, name: str):
        from impl.compose import Composed
        if name in self._siblings and isinstance(self._ns, Composed) and name in self._ns.siblings:
            # a composition calling another mechanism (ops.dsa): through that mechanism's recording proxy
            return self._siblings[name]
        if isinstance(self._ns, Composed):
            # only the candidate's own functions count; the fallback's compositions are handed this proxy
            # as `ops`, so the candidate functions they call are recorded too
            if name in self._ns.provided:
                return _recorded(self._ns.provided[name], f"{self._mechanism}.{name}", self._recorder)
            return self._ns.resolve(name, self)
        attr = getattr(self._ns, name)
        if name.startswith("_") or not callable(attr) or isinstance(attr, type):
            return attr
        return _recorded(attr, f"{self._mechanism}.{name}", self._recorder)

    def __repr__(self) -> str:
        return f"<recording {self._mechanism} namespace of {self._ns!r}>"


def _protocol(name: str) -> bool:
    """A function of the candidate protocol (impl.registry FUNCTIONS, FAST_PATHS): the ones whose inputs
    are guarded (contracts.d declares their inputs_unchanged); helpers and the engine class are not."""
    from impl.registry import FAST_PATHS, FUNCTIONS
    mech, _, fn = name.partition(".")
    return fn in FUNCTIONS.get(mech, ()) or fn in FAST_PATHS.get(mech, {})


def _recorded(fn, name: str, recorder: Recorder):
    from invariants.integrity import guarded_call
    guard = _protocol(name)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        recorder.record(name)
        recorder.depth += 1
        t0 = time.perf_counter()
        try:
            if guard:
                return guarded_call(name, fn, args, kwargs, recorder)
            return fn(*args, **kwargs)
        finally:
            recorder.depth -= 1
            if recorder.depth == 0:
                # wall time: on CUDA it includes the launches, and what the comparisons then wait for
                # is the next call's; autotuning and compilation, what a slow candidate spends, show
                recorder.seconds += time.perf_counter() - t0
    return call


def recording(impl, recorder: Recorder):
    """A copy of the Implementation bundle `impl` whose namespaces record into `recorder`."""
    swaps = {m: RecordingNamespace(getattr(impl, m), m, recorder)
             for m in NAMESPACES if getattr(impl, m, None) is not None}
    for proxy in swaps.values():
        object.__setattr__(proxy, "_siblings", swaps)
    if getattr(impl, "serving", None) is not None:
        swaps["serving"] = _recorded(impl.serving, f"serving.{getattr(impl.serving, '__name__', 'engine')}",
                                     recorder)
    return impl._replace(**swaps)


def recorder_of(impl) -> "Recorder | None":
    """The Recorder a `recording` bundle records into (None for a bundle not made by `recording`)."""
    for m in NAMESPACES:
        ns = getattr(impl, m, None)
        if isinstance(ns, RecordingNamespace):
            return ns._recorder
    return None
