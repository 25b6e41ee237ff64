"""The per-example progress lines of `glmgate run` count what a check runs: its pinned examples and
replayed failures as well as the drawn ones, so "example n/total" ends at n = total on a passing check."""
from __future__ import annotations

from gate import cli
from invariants.engine import pins_for
from invariants.matrix import CHECKS


def test_the_progress_total_is_every_example_a_passing_check_runs(monkeypatch):
    seen, ticks, real = {}, {}, cli._ticker

    def spy(prog, task, console, name, per, quiet_s=10.0):
        seen[name] = per
        tick = real(prog, task, console, name, per, quiet_s)

        def counted():
            ticks[name] = ticks.get(name, 0) + 1
            tick()
        return counted
    monkeypatch.setattr(cli, "_ticker", spy)
    assert cli.main(["run", "--check", "mhc.rerun", "--examples", "2", "--no-failures"]) == 0
    check = next(c for c in CHECKS if c.name == "mhc.rerun")
    pinned = len(pins_for(check, "cpu", "dev"))
    assert pinned > 0, "mhc.rerun has no pinned example: the test would not tell the totals apart"
    assert seen["mhc.rerun"] == 2 + pinned == ticks["mhc.rerun"]
