"""Precision islands: the dtype a comparison is judged in when a candidate computes part of a function
in a lower precision than the working dtype BY DESIGN (docs/adapters.md).

Why: transformers runs its router, mHC, KDA core, indexer scores and norms in float32 even with float64
parameters (SPEC §2). Judged at --dtype float64 with float64 contracts it would fail for no bug; judged
with widened float64 bounds every float64 candidate would be held to less. Instead a namespace declares
what it computes in which dtype, `PRECISION = {"route": "float32"}` (validated when the candidate loads,
impl/registry.py), the run says so before any example runs, and every comparison of an example in which
such a function ran is judged with that dtype's contract (its floor, bound and cap), against the
baseline run in that dtype (baseline_dtype); the check's row names the islands that applied. A declaration never makes a run stricter: an island finer than the
working dtype (float32 in a bfloat16 run) changes nothing.

An example in which none of the candidate's functions ran ran only our fallback, whose Triton kernels
compute float64 inputs in float32 (impl/moe.py; the CPU interpreter): it is judged as float32 too. Such
a check can at best be NOT COVERED, never a pass.
"""
from __future__ import annotations

from typing import Iterable, Optional

# coarsest first: a judged dtype is the coarsest of the working dtype and the islands that ran
ORDER = ("bfloat16", "float32", "float64")
ISLAND_DTYPES = ORDER[:-1]
FALLBACK = "float32"


def coarsest(dtypes: Iterable[str]) -> str:
    return min(dtypes, key=ORDER.index)


def islands(impl) -> dict:
    """{"mechanism.function": dtype} the implementation declares (impl.registry.precisions)."""
    return dict(getattr(impl, "precision", ()) or ())


def judged(impl, working: str, called: Optional[set]) -> tuple[str, tuple]:
    """(the dtype this example's comparisons are judged in, the islands that decided it).

    called: the candidate's functions that ran in the example (None: unknown, judge in `working`)."""
    if called is None or working not in ORDER:
        return working, ()
    if not called:
        # nothing of the candidate ran: only the fallback, in its own precision
        return coarsest((working, FALLBACK)), ()
    declared = islands(impl)
    used = tuple(sorted(f"{f} {declared[f]}" for f in called if f in declared
                        and ORDER.index(declared[f]) < ORDER.index(working)))
    return coarsest([working, *(declared[f] for f in called if f in declared)]), used


def baseline_dtype(impl, namespaces: Iterable[str], working: str) -> str:
    """The dtype a check runs its baseline in: the coarsest island declared on the namespaces it runs
    the candidate through (Check.namespaces), when coarser than the working dtype.

    Why: a contract of dtype d scales its limit by the error of the baseline IN d (k · err + floor). A
    float32 island judged against a float64 baseline would keep only the floor, stricter than any
    float32 implementation is held to; the candidate itself still gets the working dtype's inputs."""
    if working not in ORDER:
        return working
    mine = [d for f, d in islands(impl).items() if f.split(".")[0] in set(namespaces)]
    return coarsest([working, *mine])


def composition_line(impl) -> Optional[str]:
    """The line said before any example runs (None without a declaration)."""
    declared = islands(impl)
    if not declared:
        return None
    listed = ", ".join(f"{f} in {d}" for f, d in sorted(declared.items()))
    return (f"precision islands (declared PRECISION): {listed}: an example that runs one is judged with that "
            f"dtype's contracts when the working dtype is finer")
