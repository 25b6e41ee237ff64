"""Coverage labels: Hypothesis `event()` when inside a test, always counted for the CLI's report."""
from __future__ import annotations

import collections

from hypothesis import event
from hypothesis.control import currently_in_test_context

COUNTS: collections.Counter = collections.Counter()


def label(name: str) -> None:
    COUNTS[name] += 1
    if currently_in_test_context():
        event(name)
