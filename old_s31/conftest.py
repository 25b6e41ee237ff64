"""pytest set-up: Hypothesis profiles (invariants/profiles.py), the gpu marker, the Triton backend, and
one GPU per pytest-xdist worker.

Profile: $GLMGATE_PROFILE, else `ci` when $CI is set, else `dev` (an unknown name stops pytest with the
list of profiles).

GPUs: `pytest -n N -m gpu --gpus-per-worker` (or GLMGATE_PIN_GPUS=1 in the environment) pins xdist worker
gwK to GPU K mod the GPU count (CUDA_VISIBLE_DEVICES, set before torch initialises CUDA:
gate/multigpu.py pin_xdist_worker); a no-op without a GPU or outside xdist.
"""
import os

from gate.multigpu import PIN_ENV, pin_xdist_worker

pin_xdist_worker()      # first: CUDA reads CUDA_VISIBLE_DEVICES once, when torch initialises it

import torch  # noqa: E402

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    # must happen before anything imports triton
    os.environ["TRITON_INTERPRET"] = "1"

# tiny shapes: with 2 threads per op, torch spends ~100x the work in thread hand-offs on 2 cores
torch.set_num_threads(1)

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from invariants.profiles import default_profile, register  # noqa: E402

register()


def pytest_addoption(parser):
    parser.addoption("--gpus-per-worker", action="store_true", default=False,
                     help=f"under pytest-xdist (-n N): pin worker gwK to GPU K mod the GPU count (sets {PIN_ENV}=1 "
                          f"for the workers)")


def pytest_configure(config):
    if config.getoption("--gpus-per-worker") and "PYTEST_XDIST_WORKER" not in os.environ:
        # the controller: its workers are started after this, with its environment
        os.environ[PIN_ENV] = "1"
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
