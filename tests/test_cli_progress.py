"""Progress of a running check (gate/progress.py): "example n/total" counts what a check runs (its pinned
examples and replayed failures as well as the drawn ones), so it ends at n = total on a passing check;
without a terminal an example that runs long (a cold GPU's first, compiling every kernel it reaches)
prints a heartbeat instead of minutes of silence."""
from __future__ import annotations

import io
import time

from rich.console import Console

from gate import cli, progress
from invariants.engine import pins_for
from invariants.matrix import CHECKS


def test_the_progress_total_is_every_example_a_passing_check_runs(monkeypatch):
    seen, ticks = {}, {}

    class Spy(progress.Ticker):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            seen[self.name] = self.per

        def __call__(self):
            ticks[self.name] = ticks.get(self.name, 0) + 1
            super().__call__()
    monkeypatch.setattr(progress, "Ticker", Spy)
    assert cli.main(["run", "--check", "mhc.rerun", "--examples", "2", "--no-failures"]) == 0
    check = next(c for c in CHECKS if c.name == "mhc.rerun")
    pinned = len(pins_for(check, "cpu", "dev"))
    assert pinned > 0, "mhc.rerun has no pinned example: the test would not tell the totals apart"
    assert seen["mhc.rerun"] == 2 + pinned == ticks["mhc.rerun"]


class _Bar:
    def advance(self, task):
        pass


def _log(terminal: bool):
    buf = io.StringIO()
    return buf, Console(file=buf, force_terminal=terminal, width=200)


def test_a_long_example_prints_a_heartbeat_in_a_log():
    buf, console = _log(False)
    with progress.Ticker(_Bar(), 0, console, "x.check", 3, quiet_s=0.0, heartbeat_s=0.2) as tick:
        time.sleep(0.8)                                   # the first example, still running
        tick()
    out = buf.getvalue()
    assert "x.check: example 1/3 still running" in out
    assert "x.check: example 1/3 (" in out and "example 2/3 still running" not in out


def test_no_heartbeat_on_a_terminal_or_for_quick_examples():
    buf, console = _log(True)
    with progress.Ticker(_Bar(), 0, console, "x.check", 3, quiet_s=0.0, heartbeat_s=0.2) as tick:
        time.sleep(0.5)
        tick()
    assert "still running" not in buf.getvalue()
    buf, console = _log(False)
    with progress.Ticker(_Bar(), 0, console, "x.check", 3, quiet_s=60.0, heartbeat_s=60.0) as tick:
        tick()
        tick()
    assert buf.getvalue() == ""
