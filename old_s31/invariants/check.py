"""The check record (one row of the correctness matrix) and the repro JSON of a drawn case.

A record carries everything its test, its CLI run and its mutants need: the case type, the strategy
drawing cases from a geometry, the run function returning comparisons, the pinned examples replayed
before any draw, a cap on examples on the CPU interpreter, and its doc. Each mechanism's records live
in its checks module (invariants/<mechanism>_checks.py) beside their cases and run functions, with the
table of calls its namespace must refuse (BAD_CALLS of BadCall rows); invariants/matrix.py gathers both.
"""
from __future__ import annotations

import typing
from typing import Callable, NamedTuple, Optional


class Check(NamedTuple):
    name: str                 # "<mechanism>.<what>": the id of its test and the name a mutant designates
    mechanism: str            # its comparisons are judged under invariants/contracts.d/<mechanism>.toml
    case: type                # the NamedTuple its strategy draws (repro JSON: case_from_json)
    cases: Callable           # geometry -> SearchStrategy of `case`
    run: Callable             # (case, cand Target, base Target) -> list[Comparison]
    doc: str
    examples: tuple = ()      # pinned cases, replayed first on every run (known failures, edge shapes)
    cpu_examples: Optional[int] = None   # at most this many drawn examples on the CPU interpreter (cost)
    # the one working dtype its contracts are declared for, on every device (None: the run's dtype). A
    # check whose comparisons are not conditioned on the candidate's discrete decisions cannot be judged
    # in bf16, where a legal near-tie flip moves every downstream value (serving.state_machine)
    dtype: Optional[str] = None
    # the candidate namespaces its run function calls (None: its own mechanism's; the whole decoder and
    # serving: every mechanism's). A candidate lacking one is not run on this check, and told so
    needs: Optional[tuple] = None
    # optional functions it calls ("dsa.index_paged": impl.registry.OPTIONAL_FUNCTIONS): a candidate that
    # does not provide every one of them itself is not run on it (not covered: not provided), never
    # given ours in their place
    optional: tuple = ()
    # pinned cases replayed first only on a CUDA device (after `examples`): sizes the CPU interpreter cannot
    # afford (the full geometry: index_topk 2048 with kpool 4, KDA at T = 64K with H = 64)
    gpu_examples: tuple = ()
    # CUDA pins replayed only under the random long-run profiles (explore, nightly): cases that take tens
    # of GiB of device memory (B*T*H*K past 2^31, where 32-bit offsets wrap)
    nightly_examples: tuple = ()

    def namespaces(self, mechanisms: tuple) -> tuple:
        """The namespaces this check runs a candidate's code through (any one provided is enough to run
        it): its mechanism's (of `mechanisms`, impl.registry.MECHANISMS); for the whole decoder every
        mechanism's and the model port's; for serving those and the engine's."""
        if self.needs is not None:
            return self.needs
        if self.mechanism in mechanisms:
            return (self.mechanism,)
        return tuple(mechanisms) + {"model": ("model",), "serving": ("model", "serving")}.get(self.mechanism, ())


class NotRunnable(Exception):
    """Raised by a run function when this machine cannot run the case at all (model.sharded's world on
    fewer CUDA devices): the check's status is "not run", saying why, never a failure of the candidate."""


TARGETS = ("triton", "torch", "oracle")


class BadCall(NamedTuple):
    """One call a mechanism's namespace must refuse with a ValueError naming the argument (PyTorch
    OpInfo's error_inputs): a row of its checks module's BAD_CALLS, run on every target it names."""

    id: str                   # "<function>(<what is wrong>)": the test id after "<mechanism>:"
    call: Callable            # (namespace, Target) -> the call; inputs drawn in float64, converted by the Target
    match: str                # regex the ValueError's message must contain (re.search)
    targets: tuple = TARGETS  # the implementations the row means something for (a subset says why beside it)


def case_to_json(case) -> dict:
    """A drawn case as plain JSON (its type name, its fields; nested NamedTuples as objects)."""
    d = {"type": type(case).__name__}
    for k, v in case._asdict().items():
        d[k] = v._asdict() if hasattr(v, "_asdict") else (list(v) if isinstance(v, tuple) else v)
    return d


def case_from_json(d: dict, case_types: dict):
    """Inverse of case_to_json over `case_types` (name -> class), with a clear error on an unknown type
    or field; a field annotated with a NamedTuple type (a geometry) is rebuilt from its object; a field
    with a default may be left out."""
    d = dict(d)
    name = d.pop("type", None)
    if name not in case_types:
        raise ValueError(f"case type: expected one of {sorted(case_types)}, got {name!r}")
    cls = case_types[name]
    # a field with a default may be absent: a case recorded before the field existed replays as before
    missing = set(cls._fields) - set(d) - set(cls._field_defaults)
    extra = set(d) - set(cls._fields)
    if missing or extra:
        raise ValueError(f"{name}: missing fields {sorted(missing)}, unexpected {sorted(extra)}")
    hints = typing.get_type_hints(cls)
    for k, v in d.items():
        if isinstance(v, dict) and hasattr(hints.get(k), "_fields"):
            d[k] = hints[k](**v)
        elif isinstance(v, list):
            d[k] = tuple(v)
    return cls(**d)
