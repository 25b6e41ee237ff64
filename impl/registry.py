"""Named implementations (ARCHITECTURE.md): "triton" (the product), "torch" (plain-torch baseline of the
same math in the working dtype), "mutant:<name>" (one planted bug each, impl/mutants.py), and any
third-party candidate given as "package.module:attribute" whose object has a `kda` attribute (or
is itself a namespace with the kda functions: recurrent, chunked, decode, sublayer)."""
from __future__ import annotations

import importlib
from typing import Any, NamedTuple

MECHANISMS = ("kda",)
KDA_FUNCTIONS = ("recurrent", "chunked", "decode", "sublayer")


class Implementation(NamedTuple):
    name: str
    kda: Any


def _check_kda(name: str, ns: Any) -> Any:
    missing = [f for f in KDA_FUNCTIONS if not callable(getattr(ns, f, None))]
    if missing:
        raise ValueError(f"implementation {name!r}: its kda namespace lacks {missing} "
                         f"(expected callables {list(KDA_FUNCTIONS)} with oracle/kda.py's signatures)")
    return ns


def get(name: str) -> Implementation:
    """Resolve an implementation by name, with a clear error listing what exists."""
    if name == "triton":
        return Implementation(name, _check_kda(name, importlib.import_module("impl.kda")))
    if name == "torch":
        from impl.baseline import kda as base
        return Implementation(name, _check_kda(name, base.kda))
    if name.startswith("mutant:"):
        from impl import mutants
        m = mutants.get(name.split(":", 1)[1])
        return Implementation(name, _check_kda(name, m.factory()))
    if ":" in name:
        mod, _, attr = name.partition(":")
        try:
            obj = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"candidate {name!r}: cannot load {attr!r} from module {mod!r}: {e}") from e
        return Implementation(name, _check_kda(name, getattr(obj, "kda", obj)))
    raise ValueError(f"unknown implementation {name!r}: expected 'triton', 'torch', "
                     f"'mutant:<name>' (see `glmgate zoo --list`) or 'package.module:attribute'")
