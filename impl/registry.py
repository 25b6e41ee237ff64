"""Named implementations: "triton" (the product), "torch" (plain-torch baseline of the same math in the
working dtype), "mutant:<name>" (one planted bug each, impl/mutants/), and any third-party candidate
given as "package.module:attribute": an object with one attribute per mechanism it provides (`kda`,
`dsa`, `mla`, `mhc`, `moe`, `nvfp4`), or itself the kda namespace. A candidate namespace may provide
any subset of its mechanism's FUNCTIONS: the rest come from our Triton implementation, whose
compositions call the candidate's functions (impl/compose.py); a mechanism it lacks is not run."""
from __future__ import annotations

import importlib
from typing import Any

# the one bundle type: the decoder composition (oracle.decoder.Decoder) takes the object the checks get
from oracle.decoder import Implementation

MECHANISMS = ("kda", "dsa", "mla", "mhc", "moe", "nvfp4")
# per mechanism, exactly the functions the checks call on a candidate (directly, or through the
# compositions: kda.sublayer -> chunked / decode; mla.sublayer -> project / absorbed and the indexer's
# dsa.index_rows / index; moe.forward -> route / experts / shared_expert; the decoder -> mhc.expand /
# reduce and moe.dense_mlp on its dense layers); tests/test_framework_functions.py holds it to that.
# `glmgate run` lists per check the ones it called
FUNCTIONS = {"kda": ("recurrent", "chunked", "decode", "sublayer", "checkpoint"),
             "dsa": ("index_rows", "index"),
             "mla": ("project", "absorbed", "sublayer"),
             "mhc": ("coefficients", "collapse", "write_back", "expand", "reduce"),
             "moe": ("route", "experts", "shared_expert", "dense_mlp", "forward"),
             "nvfp4": ("quantize", "dequantize", "dequantize_swizzled", "qdq_activation", "global_scale_encode"),
             # the whole decoder over the other namespaces: impl.model.forward, impl.state's deserialize;
             # None (the default) means those two; model mutants (impl/mutants/model.py) bring their own
             "model": ("forward", "deserialize")}
KDA_FUNCTIONS = FUNCTIONS["kda"]
# per mechanism, optional calling conventions (docs/candidates.md section 13: paged caches): a candidate
# may bring them; one it lacks is NEVER filled in from the fallback (compose hides ours), and the checks
# calling it (Check.optional) are NOT RUN for it, "not covered (not provided)", said before any example
OPTIONAL_FUNCTIONS = {"dsa": ("index_paged",), "mla": ("absorbed_paged",)}
# the DSA pooled-key cache (docs/candidates.md section 4, "The pooled-key cache"): `pooled_rows` appends to
# it, `index_pooled` selects over it; our MLA sublayer appends with ours and selects with the candidate's
# `index` where it lacks them
OPTIONAL_FUNCTIONS["dsa"] += ("pooled_rows", "index_pooled")
# the prefill without a host read (issue 14 step 28, docs/candidates.md section 3): `chunked_ex` returns
# chunked's NaN flags on the device instead of raising; judged by kda.device_report only
OPTIONAL_FUNCTIONS["kda"] = OPTIONAL_FUNCTIONS.get("kda", ()) + ("chunked_ex",)
# CUDA-graph decode steps (docs/candidates.md section 15, impl/graph.py): a step object captured once over
# persistent buffers and replayed with each step's metadata copied in; optional like the paged functions
GRAPH_STEPS = {"kda": ("decode_graph",), "mla": ("absorbed_graph",)}
OPTIONAL_FUNCTIONS.update({m: OPTIONAL_FUNCTIONS.get(m, ()) + fs for m, fs in GRAPH_STEPS.items()})

# a serving engine class (Implementation.serving): constructed over a model, it must hold the state
# machine's operations (impl/serving.py Engine; invariants/serving_checks.py drives them)
SERVING_OPERATIONS = ("admit", "admit_padded", "pending", "prefill_chunk", "decode", "speculate", "accept",
                      "fork", "step", "cancel", "logits", "state", "history", "live")
# per mechanism, fused fast paths the decoder calls where a namespace has one, in place of the functions
# they fuse (oracle.decoder.Decoder.hc_entry). Optional: a candidate may bring its own. The fallback's is
# hidden from a candidate that provides any of the fused functions, or the decoder would run our kernel
# instead of the candidate's coefficients / collapse
FAST_PATHS = {"mhc": {"fused_coefficients_collapse": ("coefficients", "collapse")},
              # the sublayer's prefill from the gate's input f: gate(f + dt_bias) made inside the pass (the
              # log decays never written out), in place of gate then `chunked` (impl.kda.sublayer)
              "kda": {"gated_chunked": ("chunked",)}}
# per mechanism, the helpers our compositions call through `ops` that a candidate may replace: the norms
# (a fused norm kernel is a common optimization) and how MLA's caches grow (mla.append_rows: a new
# tensor in ours; in place in a buffer with room, impl.candidates.cache_in_place). Optional, never required, and judged only inside the
# compositions' checks (kda.sublayer and up for kda's gated norm, mla.* for MLA's q / kv norm, the model
# checks for the decoder's norm: TorchDecoder._rmsnorm takes the implementation's model namespace's)
SEAMS = {"kda": ("gated_rmsnorm",), "mla": ("rmsnorm", "append_rows"), "model": ("rmsnorm",)}
# per mechanism, the outputs a candidate may leave out ("function.output": what comparing it checks). A
# namespace declares the ones it does not compute as NOT_PROVIDED = ("chunked.boundary_states",) and
# returns None in their place; their comparisons are then "not covered", said before any example runs
# optional hooks a candidate namespace may define beside its functions: `warmup(shapes)` is called once
# before the first example of a `glmgate gate` run (gate/warmup.py), outside the judged and timed examples,
# with every shape the checks will draw (a kernel library that autotunes per shape compiles there)
HOOKS = ("warmup",)
# per "mechanism.function", the one argument a call may write and the flag that declares it: (argument,
# flag) means the call writes `argument` when called with flag=True (docs/candidates.md §2); every other
# call writes none of its inputs. The harness guards both (invariants/integrity.py)
IN_PLACE = {"kda.decode": ("state", "inplace")}
OPTIONAL = {"kda": {"chunked.boundary_states": "the state at the end of every full chunk (kda.chunked)"}}


def _check(name: str, ns: Any, mechanism: str = "kda") -> Any:
    missing = [f for f in FUNCTIONS[mechanism] if not callable(getattr(ns, f, None))]
    if missing:
        raise ValueError(f"implementation {name!r}: its {mechanism} namespace lacks {missing} (expected "
                         f"callables {list(FUNCTIONS[mechanism])} with oracle/{mechanism}.py's signatures)")
    return ns


_check_kda = _check


def _composed(name: str, ns: Any, mechanism: str) -> Any:
    """A candidate's namespace, completed from our Triton implementation where it provides only some
    functions (impl/compose.py)."""
    from impl.compose import compose
    try:
        return compose(mechanism, ns, FUNCTIONS[mechanism])
    except ValueError as e:
        raise ValueError(f"implementation {name!r}: {e} (expected callables with oracle/{mechanism}.py's "
                         f"signatures)") from e


def get(name: str) -> Implementation:
    """Resolve an implementation by name, with a clear error listing what exists."""
    if name == "triton":
        return Implementation(name, *(_check(name, importlib.import_module(f"impl.{m}"), m) for m in MECHANISMS))
    if name == "torch":
        return _baseline(name)
    if name.startswith("mutant:"):
        from impl import mutants
        m = mutants.get(name.split(":", 1)[1])
        # one planted bug: the mutated namespace (or engine), everything else from the mutant's base
        ns = m.factory()
        return get(m.base)._replace(name=name, **{m.target: _check(name, ns, m.target)
                                                  if m.target in FUNCTIONS else ns})
    if ":" in name:
        mod, _, attr = name.partition(":")
        obj = _load_candidate(name, mod, attr)
        found = {m: getattr(obj, m, None) for m in MECHANISMS}
        model, serving = getattr(obj, "model", None), getattr(obj, "serving", None)
        if not any(found.values()) and model is None and serving is None:
            found["kda"] = obj
        # a mechanism the candidate lacks is our Triton one (provides() False): its own checks do not
        # run, the decoder and serving compositions run over it
        omitted = frozenset(o for m, ns in found.items() for o in not_provided(name, ns, m))
        for m, ns in found.items():
            batch_invariant(name, ns, m)
        islands = tuple(sorted(i for m, ns in (*found.items(), ("model", model)) for i in precisions(name, ns, m)))
        from impl.compose import link
        namespaces = {m: _composed(name, ns, m) for m, ns in found.items()}
        link(namespaces)
        # the levels above the mechanisms: a model port (forward, deserialize; the rest from impl.model)
        # and a serving engine class; None keeps ours
        model = None if model is None else _composed(name, model, "model")
        return Implementation(name, **namespaces, model=model, serving=_engine_class(name, serving),
                              not_provided=omitted, precision=islands)
    raise ValueError(f"unknown implementation {name!r}: expected 'triton', 'torch', "
                     f"'mutant:<name>' (see `glmgate zoo --list`) or 'package.module:attribute'")


def _engine_class(name: str, engine: Any) -> Any:
    """A candidate's serving engine class, refused with what it lacks (None: ours)."""
    if engine is None:
        return None
    if not isinstance(engine, type):
        raise ValueError(f"implementation {name!r}: serving must be an engine CLASS (constructed over a model, "
                         f"as impl.serving.Engine is), got {type(engine).__name__}")
    missing = [op for op in SERVING_OPERATIONS if not callable(getattr(engine, op, None))]
    if missing:
        raise ValueError(f"implementation {name!r}: serving engine {engine.__name__} lacks {missing} (the "
                         f"state machine's operations, as impl.serving.Engine has them; subclass it to "
                         f"replace only some)")
    return engine


def not_provided(name: str, ns: Any, mechanism: str) -> tuple[str, ...]:
    """The outputs namespace `ns` declares it does not compute (its NOT_PROVIDED), as
    "mechanism.function.output", refused with the list of optional ones when one is not optional."""
    declared = getattr(ns, "NOT_PROVIDED", ()) if ns is not None else ()
    if isinstance(declared, str) or not all(isinstance(d, str) for d in declared):
        raise ValueError(f"implementation {name!r}: {mechanism}.NOT_PROVIDED must be a tuple of "
                         f"'function.output' strings, got {declared!r}")
    optional = OPTIONAL.get(mechanism, {})
    bad = [d for d in declared if d not in optional]
    if bad:
        known = ", ".join(f"{k} ({v})" for k, v in optional.items()) or "none"
        raise ValueError(f"implementation {name!r}: {mechanism}.NOT_PROVIDED names {bad}, which are not "
                         f"optional outputs; optional {mechanism} outputs: {known}")
    return tuple(f"{mechanism}.{d}" for d in declared)


def precisions(name: str, ns: Any, mechanism: str) -> tuple[tuple[str, str], ...]:
    """The precision islands namespace `ns` declares (its PRECISION = {"function": dtype}: the functions
    that compute part of their result in that coarser dtype whatever the working dtype), as
    (("mechanism.function", dtype), ...); refused when a function is not one of the mechanism's that the
    namespace provides, or the dtype is not a coarser one (invariants/precision.py)."""
    from invariants.precision import ISLAND_DTYPES

    declared = getattr(ns, "PRECISION", None) if ns is not None else None
    if declared is None:
        return ()
    if not isinstance(declared, dict):
        raise ValueError(f"implementation {name!r}: {mechanism}.PRECISION must be a dict {{function: dtype}}, "
                         f"got {declared!r}")
    out = []
    for fn, dtype in declared.items():
        if fn not in FUNCTIONS[mechanism] or not callable(getattr(ns, fn, None)):
            raise ValueError(f"implementation {name!r}: {mechanism}.PRECISION names {fn!r}, which its "
                             f"{mechanism} namespace does not provide (functions: {list(FUNCTIONS[mechanism])})")
        if dtype not in ISLAND_DTYPES:
            raise ValueError(f"implementation {name!r}: {mechanism}.PRECISION[{fn!r}] = {dtype!r}, expected one "
                             f"of {list(ISLAND_DTYPES)}")
        out.append((f"{mechanism}.{fn}", dtype))
    return tuple(out)


# the declarations a namespace may carry beside its functions, each read from the candidate's own namespace
# and never from the fallback that completes it (impl/compose.py): our claims are about our code
DECLARATIONS = ("BATCH_INVARIANT",)


def batch_invariant(name: str, ns: Any, mechanism: str) -> tuple[str, ...]:
    """The functions namespace `ns` claims bitwise batch-invariant (its BATCH_INVARIANT = ("chunked", ...):
    a row's result alone equals, bit for bit, its result among any other rows, at any position, with
    any padding; docs/candidates.md section 14), refused when it is not a tuple of names of the
    mechanism's functions that the namespace provides. The <mechanism>.batch checks compare a claimed
    function `exact`, every other one under its declared self_consistency bound."""
    declared = getattr(ns, "BATCH_INVARIANT", ()) if ns is not None else ()
    if isinstance(declared, str) or not isinstance(declared, (tuple, list)) or \
            not all(isinstance(d, str) for d in declared):
        raise ValueError(f"implementation {name!r}: {mechanism}.BATCH_INVARIANT must be a tuple of function "
                         f"names, got {declared!r}")
    bad = [f for f in declared if f not in FUNCTIONS[mechanism] or not callable(getattr(ns, f, None))]
    if bad:
        raise ValueError(f"implementation {name!r}: {mechanism}.BATCH_INVARIANT names {bad}, which its "
                         f"{mechanism} namespace does not provide (functions: {list(FUNCTIONS[mechanism])})")
    return tuple(declared)


def claims_batch_invariance(ns: Any, function: str) -> bool:
    """Whether namespace `ns` (a recording proxy or a composed namespace over it too) declares `function`
    bitwise batch-invariant (batch_invariant, validated when the implementation was loaded)."""
    return function in (getattr(ns, "BATCH_INVARIANT", ()) or ())


def _load_candidate(name: str, mod: str, attr: str) -> Any:
    """`package.module:attribute`, imported as pytest imports a test module: the current directory is
    searched first (no PYTHONPATH needed for a candidate beside you)."""
    import os
    import sys

    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(mod)
    except ModuleNotFoundError as e:
        if e.name and e.name != mod and not mod.startswith(e.name + "."):
            # the candidate's module was found; something it imports was not
            raise ValueError(f"candidate {name!r}: importing {mod!r} raised ModuleNotFoundError: {e} (a module "
                             f"the candidate imports is missing: install it)") from e
        raise ValueError(f"candidate {name!r}: no module {e.name!r} (searched the current directory {cwd} and "
                         f"sys.path): run from the directory that holds {mod.split('.')[0]!r}, pip install "
                         f"it, or add its parent directory to PYTHONPATH") from e
    except Exception as e:          # the candidate's own import failed: say so, with where
        raise ValueError(f"candidate {name!r}: importing {mod!r} raised {type(e).__name__}: {e}") from e
    if not hasattr(module, attr):
        public = sorted(a for a in vars(module) if not a.startswith("_"))
        raise ValueError(f"candidate {name!r}: module {mod!r} ({getattr(module, '__file__', '?')}) has no "
                         f"attribute {attr!r}; it has: {', '.join(public[:20]) or 'nothing public'}")
    return getattr(module, attr)


def _baseline(name: str) -> Implementation:
    # impl/baseline/<mechanism>.py holds its namespace under the mechanism's name
    return Implementation(name, *(_check(name, getattr(importlib.import_module(f"impl.baseline.{m}"), m), m)
                                  for m in MECHANISMS))
