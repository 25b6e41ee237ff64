"""impl.registry.FUNCTIONS is exactly what the checks call: every function it requires of a candidate is
called by some check (directly or through a composition), and no check calls a mechanism function it
does not list (which a candidate would then never be asked for, or would crash without).

Two views, as a candidate would be run: a complete namespace (our Triton modules: the checks call the
compositions, kda.sublayer, mla.sublayer, moe.forward, on it directly) and a namespace providing every
function but the compositions (the compositions then come from the fallback and call the provided
functions through the recording proxy, as they do for a partial candidate; only the records that called a
composition run in this view). Each record runs one case (its first pinned example, model.paths a cheaper
one (CHEAPER); a record that pins none, one drawn case) on our
Triton implementation through the recording proxies the engine uses for coverage. serving.state_machine
is left out on purpose: its engines run the same decoder composition as model.paths (one pinned
program costs 15-40 s on the interpreter), and its calls are the decoder's; so is model.sharded (below).
"""
from __future__ import annotations

import collections

import torch
from hypothesis import HealthCheck, find, settings

from impl import registry
from impl.compose import Composed
from invariants.coverage import Recorder, recording
from invariants.matrix import CHECKS
from invariants.model_checks import ModelCase, model_cut
from invariants.scale_checks import ScaleCase
from invariants.target import Target
from oracle.config import Geometry

# model.sharded is left out too: what it calls in this process is the decoder composition of model.paths
# (its world-1 run); its ranks call the namespaces in their own processes, where no recorder sees them
RECORDS = [c for c in CHECKS if c.mechanism != "serving" and c.name != "model.sharded"]


# model.paths' pin (2 padded rows, 2 decode steps) costs ~22 s an interpreted run, this one row ~8 s; both
# call the same functions of either view (measured: kda.sublayer ... moe.route; kda.chunked, kda.decode ...)
# kda.scale's pin (3 rows of 130 tokens) ~5 s, one row of 65 ~1 s: both call kda.chunked only
CHEAPER = {"model.paths": ModelCase("tiny", model_cut(Geometry.preset("tiny")), 0, 1, 4, (0,), (1, 3), 1, 1),
           "kda.scale": ScaleCase(1, 16, 1, 65, "normal", 0)}


def _case(check):
    if check.name in CHEAPER:
        return CHEAPER[check.name]
    if check.examples:
        return check.examples[0]
    return find(check.cases(Geometry.preset("tiny")), lambda c: True,
                settings=settings(database=None, suppress_health_check=list(HealthCheck)))


def _calls(bundle, records=RECORDS) -> dict:
    """check name -> the "mechanism.function" names of `bundle` it called, one case each."""
    base = Target(registry.get("torch"), "cpu", torch.float32)
    out = {}
    for check in records:
        rec = Recorder()
        check.run(_case(check), Target(recording(bundle, rec), "cpu", torch.float32), base)
        out[check.name] = set(rec.called)
    return out


def _by_mechanism(calls: dict) -> dict:
    called = collections.defaultdict(set)
    for name in set().union(*calls.values()):
        mechanism, fn = name.split(".", 1)
        called[mechanism].add(fn)
    return called


def _called(bundle, records=RECORDS) -> dict:
    """mechanism -> the functions of `bundle` the records called, one case each."""
    return _by_mechanism(_calls(bundle, records))


def _composing(calls: dict, triton) -> list:
    """The records that called a composition of the complete namespace: only there can the primitives
    view call anything else (elsewhere both views call the same provided functions)."""
    comps = {f"{m}.{f}" for m in registry.MECHANISMS for f in getattr(getattr(triton, m), "COMPOSITIONS", {})}
    return [c for c in RECORDS if calls[c.name] & comps]


def _primitives(triton):
    """Every mechanism as a candidate providing all its functions except the compositions."""
    def ns(m):
        mod = getattr(triton, m)
        comps = getattr(mod, "COMPOSITIONS", {})
        functions = registry.FUNCTIONS[m] + registry.OPTIONAL_FUNCTIONS.get(m, ())
        return Composed(m, {f: getattr(mod, f) for f in functions if f not in comps}, mod, "triton")
    return triton._replace(**{m: ns(m) for m in registry.MECHANISMS})


def _nvfp4_alone(triton):
    """Only the NVFP4 primitives provided: nvfp4.gate then composes the mixture from them (our fused MoE
    kernel would call none of them)."""
    nv = {f: getattr(triton.nvfp4, f) for f in registry.FUNCTIONS["nvfp4"]}
    return triton._replace(nvfp4=Composed("nvfp4", nv, triton.nvfp4, "triton"),
                           moe=Composed("moe", {}, triton.moe, "triton"))


def test_the_required_functions_are_exactly_the_functions_the_checks_call():
    triton = registry.get("triton")
    calls = _calls(triton)
    whole, parts = _by_mechanism(calls), _called(_primitives(triton), _composing(calls, triton))
    parts["nvfp4"] |= _called(_nvfp4_alone(triton), [c for c in RECORDS if c.name == "nvfp4.gate"])["nvfp4"]
    for m in registry.MECHANISMS:
        required, called = set(registry.FUNCTIONS[m]), whole[m] | parts[m]
        # a fused fast path is called where a namespace has one (ours does), never required
        called -= set(registry.FAST_PATHS.get(m, {}))
        # a seam (the norms) is called through `ops` by our compositions, never required
        called -= set(registry.SEAMS.get(m, ()))
        # an optional calling convention (paged caches) is called by its own checks, never required
        optional = set(registry.OPTIONAL_FUNCTIONS.get(m, ()))
        assert optional <= called, f"{m}: optional functions no check calls: {sorted(optional - called)}"
        called -= optional
        assert called == required, (f"{m}: required but never called {sorted(required - called)}; "
                                    f"called but not required {sorted(called - required)}")
