"""The KPool / DSA indexer row of the correctness matrix on the Triton implementation (CPU interpreter,
float32): indexer rows, pool scores and the tie-aware selection at pool-boundary lengths, with left
padding, decode queries after any prefix and exact score ties made on purpose. The oracle's own
properties (tail, anchoring, width, visibility) are tests/test_oracle_kpool.py."""
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
@example(sc.IndexCase(G0, 1, 5, 5, (0,), "none", "normal", 0))              # tail only, P = 1
@example(sc.IndexCase(G0, 2, 13, 13, (0, 3), "none", "normal", 1))          # real top-k, left padding
@example(sc.IndexCase(G0, 1, 23, 1, (0,), "exact", "normal", 2))            # decode query, exact tie
@example(sc.IndexCase(G0._replace(kpool=8), 1, 17, 17, (0,), "none", "large", 3))
def test_index(case):
    run_one(BY_NAME["dsa.index"], case, *cpu_targets())
