"""pytest plugin: the glmgate correctness matrix on your candidate, as pytest items.

    pytest --glmgate-candidate mykernels:KDA

adds one item per check of the matrix (`glmgate::kda.chunked`, ...) to whatever else pytest collects
(nothing else is needed: it works in a directory without test files). Registered as the `glmgate`
pytest11 entry point, so pytest loads it in every run once glmgate is installed; without
--glmgate-candidate it does nothing at all: it imports neither torch, triton nor Hypothesis, adds no
item, marker or header line. docs/pytest.md has the options and what each outcome means.

Everything heavy lives in glmgate/_matrix_items.py, imported only once the option is given.
"""
from __future__ import annotations

import os
import sys

import pytest

PROFILES = "dev, ci, gpu, explore, nightly"   # invariants/profiles.py EXAMPLES (not imported: inert)


def pytest_addoption(parser) -> None:
    g = parser.getgroup("glmgate", "glmgate: the correctness matrix on your kernels (docs/pytest.md)")
    g.addoption("--glmgate-candidate", metavar="PKG.MOD:OBJ", default=None,
                help="run the matrix on this candidate (an object with one namespace per mechanism it "
                     "provides: kda, dsa, mla, mhc, moe, nvfp4), imported from the current directory "
                     "first; also triton, torch or mutant:NAME. Without it the plugin does nothing")
    g.addoption("--glmgate-device", default="cpu", metavar="cpu|cuda",
                help="cpu (Triton's interpreter, float32; the default) or cuda (bf16)")
    g.addoption("--glmgate-dtype", default=None,
                help="working dtype: float32 (default on cpu), bfloat16 (default on cuda)")
    g.addoption("--glmgate-mechanism", default=None, metavar="A,B",
                help="only the checks of these mechanisms (comma-separated; default: all)")
    g.addoption("--glmgate-check", action="append", default=None, metavar="NAME",
                help="only this check, e.g. kda.chunked (repeatable)")
    g.addoption("--glmgate-profile", default=None,
                help=f"Hypothesis profile ({PROFILES}); default ci on cpu, gpu on cuda (both derandomized: "
                     f"the same examples every run)")
    g.addoption("--glmgate-examples", type=int, default=None, metavar="N",
                help="drawn examples per check (default: the profile's, capped per check on the CPU)")
    g.addoption("--glmgate-baseline", default="torch", metavar="NAME",
                help="the plain-torch baseline the kernel_replacement contracts are relative to (default "
                     "torch)")
    g.addoption("--glmgate-failures", default=None, metavar="DIR",
                help="the failure store: failing cases are recorded here and replayed first on the next "
                     "run (default $GLMGATE_FAILURES, else ./.glmgate-failures)")
    g.addoption("--glmgate-no-failures", action="store_true", default=False,
                help="neither replay nor record failing cases")


def _active(namespace) -> bool:
    return bool(getattr(namespace, "glmgate_candidate", None))


def select_backend(device: str) -> None:
    """Triton reads TRITON_INTERPRET when it decorates a kernel, so this must precede any kernel import."""
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    elif device.startswith("cuda"):
        os.environ.pop("TRITON_INTERPRET", None)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    # before any conftest.py is imported: a user's conftest may import (via our impl/) triton
    ns = early_config.known_args_namespace
    if _active(ns):
        select_backend(ns.glmgate_device)


def pytest_configure(config) -> None:
    if not _active(config.option):
        return
    device = config.getoption("glmgate_device")
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1" and "triton" in sys.modules:
        raise pytest.UsageError(
            "--glmgate-device cpu: triton was imported before glmgate could select its CPU interpreter; "
            "set TRITON_INTERPRET=1 in the environment (or load glmgate by its entry point, not from a conftest)")
    select_backend(device)
    from glmgate import _matrix_items

    config.pluginmanager.register(_matrix_items.MatrixPlugin(config), "glmgate-matrix")
