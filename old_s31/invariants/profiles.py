"""Hypothesis profiles shared by pytest (conftest.py) and the CLI (`--profile`).

  dev       8 examples, random, no database: the fast local loop
  ci       20 examples, derandomized: CI and `glmgate zoo`, the same examples every run
  gpu      40 examples, derandomized: GPU verdicts, so a red run is the code, not the draw
  explore 150 examples, random, writes `.hypothesis-db`: nightly GPU runs that hunt for new failures
  nightly 300 examples, random, writes `.hypothesis-db`: long nightly CPU runs

Derandomized profiles draw from a fixed seed (in `glmgate run`: one derived from the check's name;
in pytest: from the test function), so a verdict cannot change between two runs of the same code.
Hypothesis allows no example database with derandomize, so their known failures are replayed as
explicit examples: the records' pinned `@example` rows, and the failure store's entries
(invariants/failures.py: what `glmgate run` / `gate` shrank before, under any profile). The random
profiles also write what they find to `.hypothesis-db` (and replay it first on the next run). `--seed N` replaces a profile's draws with seed N's,
under every profile (same seed, same examples). Random profiles say derandomize=False explicitly: under
$CI Hypothesis's own default is derandomized, and a profile inherits it.

deadline=None everywhere: kernels compile (or the interpreter warms up) on first call.
"""
from __future__ import annotations

import os
import pathlib

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

DB_DIR = pathlib.Path(__file__).resolve().parent.parent / ".hypothesis-db"
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
EXAMPLES = {"dev": 8, "ci": 20, "gpu": 40, "explore": 150, "nightly": 300}
DERANDOMIZED = ("ci", "gpu")


def register() -> None:
    common = dict(deadline=None, suppress_health_check=_SUPPRESS, print_blob=True)
    db = DirectoryBasedExampleDatabase(DB_DIR)
    for name, n in EXAMPLES.items():
        if name in DERANDOMIZED:
            # Hypothesis forbids a database with derandomize=True
            settings.register_profile(name, max_examples=n, derandomize=True, database=None, **common)
        else:
            # explicitly random: under $CI Hypothesis's own default is derandomized, and profiles inherit it
            settings.register_profile(name, max_examples=n, derandomize=False,
                                      database=db if name in ("explore", "nightly") else None, **common)


def check_name(name: str, where: str = "--profile") -> str:
    """`name` if it is a profile, else ValueError naming the known ones."""
    if name not in EXAMPLES:
        raise ValueError(f"{where}: unknown profile {name!r}; known profiles: {', '.join(EXAMPLES)}")
    return name


def default_profile() -> str:
    """$GLMGATE_PROFILE, else `ci` when $CI is set, else `dev`."""
    env = os.environ.get("GLMGATE_PROFILE")
    if env:
        return check_name(env, "$GLMGATE_PROFILE")
    return "ci" if os.environ.get("CI") else "dev"
