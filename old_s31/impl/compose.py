"""A candidate that provides SOME of a mechanism's functions, run inside the project's compositions.

A namespace that brings only `chunked` gets the rest from a fallback (our Triton implementation), and
the fallback's compositions (`kda.sublayer`, `mla.sublayer`, `moe.forward`: each module's COMPOSITIONS)
call the candidate's functions wherever it provides them: they take the namespace they compose over as
`ops`, and a composed namespace passes itself. So one changed kernel is exercised by every path that
uses it (sublayer, paths, packed, the whole decoder, serving), not only by its own unit check.

What came from where is recorded (`provided`, `fallback_name`) for the report; invariants/coverage.py
counts only the candidate's own functions as covered.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any


class Composed:
    """One mechanism's namespace: the candidate's functions where it provides them, else the fallback's,
    the fallback's compositions calling back into this namespace."""

    def __init__(self, mechanism: str, provided: dict, fallback: Any, fallback_name: str):
        self.mechanism, self.provided = mechanism, dict(provided)
        self.fallback, self.fallback_name = fallback, fallback_name
        self.compositions = dict(getattr(fallback, "COMPOSITIONS", {}))
        from impl.registry import FAST_PATHS, OPTIONAL_FUNCTIONS
        self.fast_paths = FAST_PATHS.get(mechanism, {})
        self.optional = OPTIONAL_FUNCTIONS.get(mechanism, ())
        # other mechanisms' namespaces the compositions call (impl.mla.sublayer -> ops.dsa): the bundle's,
        # set by link(); until then the fallback's own
        self.siblings = {m: getattr(fallback, m) for m in getattr(fallback, "SIBLINGS", ())}
        # the candidate's own hooks (impl.registry.HOOKS: warmup), never the fallback's
        self.hooks = {}
        # the candidate's own declarations (impl.registry.DECLARATIONS: BATCH_INVARIANT), never the fallback's
        self.declared = {}

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("mechanism", "provided", "fallback", "fallback_name",
                                             "compositions", "fast_paths", "siblings", "hooks", "optional",
                                             "declared"):
            raise AttributeError(name)
        return self.resolve(name, self)

    def resolve(self, name: str, ops: Any):
        """`name` as seen through `ops` (this namespace, or a recording proxy over it)."""
        if name in self.provided:
            return self.provided[name]
        if name in self.hooks:
            return self.hooks[name]
        from impl.registry import DECLARATIONS
        if name in DECLARATIONS:
            # what the candidate claims about its own functions; the fallback's claims are about ours
            return self.declared.get(name, ())
        if name in self.siblings:
            return self.siblings[name]
        if name in self.optional:
            # an optional function the candidate lacks is not provided: the fallback's would run our
            # code under the candidate's name (impl.registry.OPTIONAL_FUNCTIONS)
            raise AttributeError(f"{name}: an optional function the candidate does not provide")
        if name in self.compositions:
            return functools.partial(getattr(self.fallback, name), ops=ops)
        if any(f in self.provided for f in self.fast_paths.get(name, ())):
            # the fallback's fused kernel would bypass the candidate's own functions: callers take the
            # unfused path (hasattr / getattr with a default see no such attribute)
            raise AttributeError(f"{name}: the candidate provides {', '.join(self.fast_paths[name])} "
                                 f"and not this fused path, so the fallback's is hidden")
        return getattr(self.fallback, name)

    def origin(self, name: str) -> str:
        """"candidate", "<fallback> composing the candidate's f, g" or "<fallback>"."""
        if name in self.provided:
            return "candidate"
        used = [f for f in self.compositions.get(name, ()) if f in self.provided]
        return f"{self.fallback_name} composing the candidate's {', '.join(used)}" if used else self.fallback_name

    def __repr__(self) -> str:
        return (f"<{self.mechanism} namespace: candidate {sorted(self.provided)}, the rest from "
                f"{self.fallback_name}>")


def link(namespaces: dict) -> None:
    """Point every Composed namespace's siblings at the bundle's namespaces (mechanism -> namespace), so
    a composition reaches a candidate's other mechanisms (our MLA sublayer, a candidate's indexer)."""
    for ns in namespaces.values():
        if isinstance(ns, Composed):
            ns.siblings = {m: namespaces[m] for m in ns.siblings if namespaces.get(m) is not None}


def _unwrapped(ns: Any) -> Any:
    """The namespace under a recording proxy (invariants/coverage.py), or `ns` itself."""
    return vars(ns).get("_ns", ns) if hasattr(ns, "__dict__") else ns


def from_candidate(ns: Any, name: str) -> bool:
    """Whether `name` of namespace `ns` (or of a recording proxy over it) is the candidate's own function
    rather than the fallback's (a complete namespace's functions are all its own)."""
    inner = _unwrapped(ns)
    return ns is not None and (not isinstance(inner, Composed) or name in inner.provided)


def provides(ns: Any) -> bool:
    """True when a candidate's namespace (or a recording proxy over it) holds a function of its own."""
    inner = _unwrapped(ns)
    return ns is not None and not (isinstance(inner, Composed) and not inner.provided)


def compose(mechanism: str, ns: Any, functions: tuple, fallback_name: str = "triton") -> Any:
    """`ns` itself when it provides every one of `functions`; else a Composed namespace over the
    fallback (only "triton": its compositions take `ops`; the torch baseline composes through `self`,
    so a candidate extends it by subclassing). ns None (the candidate lacks the mechanism): the
    fallback's whole namespace, for the decoder and serving compositions (provides() is False)."""
    if ns is None:
        return Composed(mechanism, {}, importlib.import_module(f"impl.{mechanism}"), fallback_name)
    provided = {f: getattr(ns, f) for f in functions if callable(getattr(ns, f, None))}
    if len(provided) == len(functions):
        return ns
    from impl.registry import FAST_PATHS, HOOKS, OPTIONAL_FUNCTIONS, SEAMS
    provided.update({f: getattr(ns, f) for f in (*FAST_PATHS.get(mechanism, {}), *OPTIONAL_FUNCTIONS.get(mechanism, ()),
                                                 *SEAMS.get(mechanism, ()))
                     if callable(getattr(ns, f, None))})
    if fallback_name != "triton":
        raise ValueError(f"fallback {fallback_name!r}: only 'triton' composes a partial namespace (subclass "
                         f"impl.baseline's classes to extend the torch baseline)")
    if not provided:
        raise ValueError(f"its {mechanism} namespace provides none of {list(functions)}")
    composed = Composed(mechanism, provided, importlib.import_module(f"impl.{mechanism}"), fallback_name)
    composed.hooks = {h: getattr(ns, h) for h in HOOKS if callable(getattr(ns, h, None))}
    from impl.registry import DECLARATIONS
    composed.declared = {d: getattr(ns, d) for d in DECLARATIONS if hasattr(ns, d)}
    return composed
