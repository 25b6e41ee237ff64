"""The MLA row of the correctness matrix on the Triton implementation (CPU interpreter, float32):
sparse absorbed attention vs the oracle, and full + shared DSA layers over a stream cut into calls
(outputs, the normalized latent cache and the indexer rows equal the oracle's one prefill). The
oracle's own properties (expanded == absorbed scores, the 1/sqrt(d_n) scale, the cached latent is
normalized) are tests/test_oracle_mla.py."""
from __future__ import annotations

from hypothesis import example, given

from invariants.engine import run_one
from invariants.matrix import BY_NAME
from invariants.target import cpu_targets
from oracle.config import Geometry
from strategies import cases as sc
from strategies.geometry import DSAGeometry

TINY = Geometry.preset("tiny")
G0 = DSAGeometry.from_geometry(TINY)



@given(sc.index_cases(TINY))
@example(sc.IndexCase(G0, 2, 13, 13, (0, 2), "none", "normal", 0))
@example(sc.IndexCase(G0, 1, 65, 1, (0,), "none", "normal", 1))
def test_absorbed(case):
    run_one(BY_NAME["mla.absorbed"], case, *cpu_targets())


@given(sc.mla_cases(TINY))
@example(sc.MLACase(G0, 1, 13, (0,), (5, 8), "normal", 0))
@example(sc.MLACase(G0, 2, 9, (3, 0), (4, 1, 4), "normal", 1))
def test_paths(case):
    """Prefix/chunk/continuation on the latent cache and indexer rows; the shared layer's hand-off."""
    run_one(BY_NAME["mla.paths"], case, *cpu_targets())
