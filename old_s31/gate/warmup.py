"""The warm-up before a gate's examples, and fixed shapes (`glmgate gate --warmup / --fixed-shapes`).

A kernel library that autotunes or compiles per shape pays that on the first call of each shape: fla's
chunk_kda took 75-86 s per new (heads, head dim, varlen) on an H200 and 1-2 ms after, so a gate charged
minutes to its first examples of each shape. A candidate namespace may define `warmup(shapes)`
(impl.registry.HOOKS); the gate calls it once per mechanism, before any example, with every shape the
checks will draw, and reports its time apart from the examples'. `--fixed-shapes` pins the drawn
dimensions to the base geometry (strategies.geometry.VARY_SHAPES), so there are fewer shapes to warm.
"""
from __future__ import annotations

import contextlib
import time


def add_flags(p) -> None:
    p.add_argument("--warmup", dest="warmup", action="store_true", default=True,
                   help="call each candidate namespace's warmup(shapes) before the first example, outside "
                        "the judged and timed examples (default; docs/candidates.md 'Warm-up')")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="do not call warmup: first-call compile and autotune time is charged to the examples")
    p.add_argument("--fixed-shapes", action="store_true",
                   help="draw only the base geometry's dimensions (KDA heads and head dim, the DSA pool size) "
                        "instead of variations around them: one shape per mechanism to compile or autotune, "
                        "plus the shapes of the checks' pinned examples (they run as written; warmed too)")


@contextlib.contextmanager
def fixed_shapes(fixed: bool):
    """Draw only the base geometry's dimensions inside (when `fixed`); restored after, so that an
    in-process caller (the tests, the pytest plugin) keeps its variations."""
    import strategies.geometry as sg

    before, sg.VARY_SHAPES = sg.VARY_SHAPES, not fixed and sg.VARY_SHAPES
    try:
        yield
    finally:
        sg.VARY_SHAPES = before


def shapes(mechanism: str, geometry, device: str, dtype: str, checks=()) -> list[dict]:
    """Every shape the checks of `mechanism` draw, as the dicts `warmup` receives: device and dtype (a
    torch dtype) always; KDA adds heads, head_dim and varlen; the others get the base `geometry`. KDA's
    pinned examples of `checks` on `device` (explicit cases, the CUDA pins included on a GPU:
    --fixed-shapes does not reshape them) add theirs."""
    from invariants.engine import pins_for
    from invariants.target import DTYPES

    common = {"device": device, "dtype": DTYPES[dtype]}
    if mechanism == "kda":
        from strategies.geometry import kda_variations

        dims = [(g.heads, g.head_dim) for g in kda_variations(geometry)]
        # the gate runs the derandomized profiles (ci, gpu): never the nightly pins
        pinned = [(c.heads, c.head_dim) for ch in checks if ch.mechanism == "kda" for c in pins_for(ch, device, "gpu")
                  if isinstance(getattr(c, "heads", None), int) and isinstance(getattr(c, "head_dim", None), int)]
        return [dict(common, heads=h, head_dim=k, varlen=varlen)
                for h, k in dict.fromkeys(dims + pinned) for varlen in (False, True)]
    return [dict(common, geometry=geometry)]


class WarmupFailed(Exception):
    """A candidate's warmup raised: its set-up is broken before any example could say so."""


def run(impl, checks, geometry, device: str, dtype: str, console) -> dict:
    """Call the warmup hook of every namespace the checks use that has one; {mechanism: seconds}."""
    took = {}
    for m in dict.fromkeys(c.mechanism for c in checks):
        hook = getattr(getattr(impl, m, None), "warmup", None)
        if not callable(hook):
            continue
        todo = shapes(m, geometry, device, dtype, checks)
        console.print(f"warm-up: {m}.warmup over {len(todo)} shapes (outside the examples) ...", markup=False)
        t0 = time.time()
        try:
            hook(todo)
            if device == "cuda":
                import torch

                torch.cuda.synchronize()
        except Exception as e:
            raise WarmupFailed(f"{impl.name}: {m}.warmup raised {type(e).__name__}: {e}") from e
        took[m] = round(time.time() - t0, 2)
        console.print(f"warm-up: {m}.warmup took {took[m]:.1f} s", markup=False)
    return took
