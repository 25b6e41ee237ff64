"""The planted-bug catalogue: one deliberate mistake per class, one module per mechanism.

A mutant that no test catches marks an untested property (TESTING.md: "a test that cannot fail is
a defect"). Each is a class overriding ONE small method of its baseline (impl/baseline/, our Triton
namespace as a class for a kernel option or a one-line edit of a kernel (catalogue.kernel_edited),
ModelOps in model.py, impl/serving.py's Engine), registered by `@mutant(check, quantity)`: the check of
invariants/matrix.py that must catch it, by its exact name, and the contract quantity it breaks
(catalogue.py). `glmgate zoo` and impl/registry.py ("mutant:<name>") read MUTANTS; invariants/matrix.py
calls `validate` on it once CHECKS is built. Add a mutant as one decorated class in its mechanism's
module.
"""
import importlib
import pkgutil

from impl.mutants.catalogue import MUTANTS, Mutant, get, mutant, validate

# every module of this package registers its mutants when imported: a new mechanism's module needs no line here
for _m in pkgutil.iter_modules(__path__):
    if _m.name != "catalogue":
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = ["MUTANTS", "Mutant", "get", "mutant", "validate"]
