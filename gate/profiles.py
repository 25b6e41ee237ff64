"""Hypothesis profiles shared by pytest (conftest.py) and the CLI (`--profile`).

dev: fast local loop. ci: derandomized (same examples every run; Hypothesis allows no database
with derandomize, so CI replays known failures through @example rows). nightly: many examples, writes the database. gpu: for `-m gpu` runs on the device.
deadline=None everywhere: kernels compile (or the interpreter warms up) on first call.
"""
from __future__ import annotations

import os
import pathlib

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

DB_DIR = pathlib.Path(__file__).resolve().parent.parent / ".hypothesis-db"
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
EXAMPLES = {"dev": 8, "ci": 20, "nightly": 300, "gpu": 40}


def register() -> None:
    common = dict(deadline=None, suppress_health_check=_SUPPRESS, print_blob=True)
    settings.register_profile("dev", max_examples=EXAMPLES["dev"], database=None, **common)
    # Hypothesis forbids a database with derandomize=True; CI's known failures live as @example rows
    settings.register_profile("ci", max_examples=EXAMPLES["ci"], derandomize=True, database=None,
                              **common)
    settings.register_profile("nightly", max_examples=EXAMPLES["nightly"],
                              database=DirectoryBasedExampleDatabase(DB_DIR), **common)
    settings.register_profile("gpu", max_examples=EXAMPLES["gpu"], database=None, **common)


def default_profile() -> str:
    return os.environ.get("GLMGATE_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
