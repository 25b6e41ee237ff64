"""pytest set-up: Hypothesis profiles (invariants/profiles.py), the gpu marker, the Triton backend.

Profile: $GLMGATE_PROFILE, else `ci` when $CI is set, else `dev` (an unknown name stops pytest with the
list of profiles).
"""
import os

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    # must happen before anything imports triton
    os.environ["TRITON_INTERPRET"] = "1"

# tiny shapes: with 2 threads per op, torch spends ~100x the work in thread hand-offs on 2 cores
torch.set_num_threads(1)

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from invariants.profiles import default_profile, register  # noqa: E402

register()


def pytest_configure(config):
    # here, not at import: a UsageError is reported as one line, an import-time error as a traceback;
    # still before collection, so test modules read settings.default under the chosen profile
    try:
        settings.load_profile(default_profile())
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device: run `pytest -m gpu` on the GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
