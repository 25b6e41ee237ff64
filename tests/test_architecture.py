"""The import rules of ARCHITECTURE.md, read from the source (no module is imported):

* impl/ takes from oracle/ only the containers, geometry, states, checkpoint formats and the decoder's
  composition (oracle.decoder), never a mechanism's math (oracle.kda, mla, dsa, moe, mhc, nvfp4, model):
  an impl kernel agreeing with the oracle because it calls the oracle would prove nothing;
* oracle/ runs on NumPy alone: no torch, triton, impl, invariants, gate or glmgate;
* glmgate/ (the public API and the pytest plugin) sits on top: it may import anything, nothing imports it;
  the modules pytest loads in every run (glmgate/__init__.py, glmgate/pytest_plugin.py) import only the
  standard library and pytest at module level, so the plugin costs nothing unless it is asked for.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

IMPL_MAY_IMPORT = {"oracle.config", "oracle.types", "oracle.state", "oracle.decoder", "oracle.fields",
                   "oracle.checkpoint", "oracle.checkpoint_names", "oracle.checkpoint_read",
                   "oracle.checkpoint_write"}
ORACLE_MAY_NOT_IMPORT = {"torch", "triton", "impl", "invariants", "gate", "glmgate"}
BELOW_GLMGATE = ("oracle", "impl", "strategies", "invariants", "gate")
# what pytest imports in every run once glmgate is installed (the pytest11 entry point and its package)
ALWAYS_LOADED = ("glmgate/__init__.py", "glmgate/pytest_plugin.py")
ALWAYS_LOADED_MAY_IMPORT = {"__future__", "os", "sys", "importlib", "pytest"}


def imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, module) for every import in the file, at any depth: `from a import b` counts as a.b when
    a is a package whose submodule b could be meant (oracle, impl), else as a."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:                     # relative: resolve against the file's package
                package = path.relative_to(ROOT).parent.parts
                base = package[:len(package) - (node.level - 1)]
                module = ".".join(base + ((node.module,) if node.module else ()))
            else:
                module = node.module
            if module in ("oracle", "impl"):
                found += [(node.lineno, f"{module}.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, module))
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)):
            found.append((node.lineno, str(node.args[0].value)))
    return found


def _files(package: str) -> list[pathlib.Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _name(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", _files("impl"), ids=_name)
def test_impl_imports_no_oracle_math(path):
    bad = [f"{_name(path)}:{line}: imports {m}" for line, m in imports(path)
           if m.split(".")[0] == "oracle" and ".".join(m.split(".")[:2]) not in IMPL_MAY_IMPORT]
    assert not bad, ("impl/ may take from oracle/ only " + ", ".join(sorted(IMPL_MAY_IMPORT)) +
                     " (no mechanism math):\n  " + "\n  ".join(bad))


@pytest.mark.parametrize("path", _files("oracle"), ids=_name)
def test_oracle_imports_no_torch_impl_or_harness(path):
    bad = [f"{_name(path)}:{line}: imports {m}" for line, m in imports(path)
           if m.split(".")[0] in ORACLE_MAY_NOT_IMPORT or "torch" in m.split(".")]
    assert not bad, ("oracle/ is float64 NumPy on its own (no " + ", ".join(sorted(ORACLE_MAY_NOT_IMPORT)) +
                     "):\n  " + "\n  ".join(bad))


@pytest.mark.parametrize("path", [f for p in BELOW_GLMGATE for f in _files(p)], ids=_name)
def test_nothing_below_the_public_api_imports_it(path):
    bad = [f"{_name(path)}:{line}: imports {m}" for line, m in imports(path) if m.split(".")[0] == "glmgate"]
    assert not bad, "glmgate/ is the public API over the packages; none of them may import it:\n  " + "\n  ".join(bad)


@pytest.mark.parametrize("rel", ALWAYS_LOADED)
def test_what_pytest_always_loads_imports_only_the_standard_library_and_pytest(rel):
    path = ROOT / rel
    tree = ast.parse(path.read_text(), str(path))
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = [(n.lineno, a.name) for n in top if isinstance(n, ast.Import) for a in n.names]
    names += [(n.lineno, n.module or "") for n in top if isinstance(n, ast.ImportFrom)]
    bad = [f"{rel}:{line}: imports {m} at module level" for line, m in names
           if m.split(".")[0] not in ALWAYS_LOADED_MAY_IMPORT]
    assert not bad, ("loaded in every pytest run, so it may import at module level only "
                     f"{sorted(ALWAYS_LOADED_MAY_IMPORT)} (import the rest inside the function that needs it):\n  "
                     + "\n  ".join(bad))


def test_the_rules_see_every_package():
    """A move that empties a folder must not turn these tests into no-ops."""
    assert len(_files("impl")) >= 10 and len(_files("oracle")) >= 10
    assert (ROOT / "oracle" / "decoder.py").exists() and (ROOT / "impl" / "model.py").exists()
    assert all((ROOT / rel).exists() for rel in ALWAYS_LOADED)
