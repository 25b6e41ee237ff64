"""`glmgate run --list`: the correctness matrix's check records, one table row each."""
from __future__ import annotations


def list_checks(console) -> None:
    """`glmgate run --list`: the check records, as the table holds them (invariants/matrix.py)."""
    from rich.table import Table

    from invariants.engine import REFERENCE_CHECK
    from invariants.matrix import CHECKS

    table = Table(title="glmgate: the correctness matrix (run one with --check NAME, a row with --mechanism)")
    for col in ("check", "cases", "pinned", "CPU cap", "what it holds"):
        table.add_column(col, overflow="fold")
    for c in CHECKS:
        cuda = len(c.gpu_examples) + len(c.nightly_examples)
        table.add_row(c.name, c.case.__name__, str(len(c.examples)) + (f" (+{cuda} CUDA)" if cuda else ""),
                      str(c.cpu_examples or "-"),
                      c.doc + (f" (judged in {c.dtype} on every device)" if c.dtype else ""))
    table.add_row(REFERENCE_CHECK, "fixed paths", "-", "-", "the float64 oracle's logits vs the published "
                  "transformers implementation (NOT RUN, and said so, without a usable transformers)")
    console.print(table)
