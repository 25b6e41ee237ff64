"""Fewer pinned examples for the tests of the runner itself (the gate, the CLI, the plugin, the adapters).

Their properties are the runner's: what it reports, warms, covers, times and exits with. They hold on any
case a check runs, so these tests keep only the pins they need. Every pin of every check still runs
in tests/test_matrix.py (ours on the interpreter), and each mutant's check runs all its pins in
tests/test_framework_mutants.py.
"""
from __future__ import annotations


def keep_pins(monkeypatch, keep: dict) -> None:
    """{check name: indices of its pinned examples to keep (empty: none, only drawn cases)}, for the rest of the
    test (every place that looks a check up by name or lists the checks sees the shortened record)."""
    from invariants import matrix
    checks = list(matrix.CHECKS)
    for name, idx in keep.items():
        old = matrix.BY_NAME[name]
        if idx and max(idx) >= len(old.examples):
            raise ValueError(f"keep_pins: {name} pins {len(old.examples)} examples, asked for {idx}")
        new = old._replace(examples=tuple(old.examples[i] for i in idx))
        monkeypatch.setitem(matrix.BY_NAME, name, new)
        checks[checks.index(old)] = new
    monkeypatch.setattr(matrix, "CHECKS", tuple(checks))
