"""The planted-bug catalogue: one deliberate mistake per class, one module per mechanism.

A mutant that no test catches marks an untested property (TESTING.md: "a test that cannot fail is
a defect"). Each is a class overriding ONE small method of its baseline (impl/baseline/, ModelOps in
model.py, impl/serving.py's Engine), registered by `@mutant(check, quantity)`: the check of
invariants/matrix.py that must catch it, by its exact name, and the contract quantity it breaks
(catalogue.py). `glmgate zoo` and impl/registry.py ("mutant:<name>") read MUTANTS; invariants/matrix.py
calls `validate` on it once CHECKS is built. Add a mutant as one decorated class in its mechanism's
module.
"""
from impl.mutants import dsa, kda, mhc, mla, model, moe, nvfp4, serving  # noqa: F401  (each registers its mutants)
from impl.mutants.catalogue import MUTANTS, Mutant, get, mutant, validate

__all__ = ["MUTANTS", "Mutant", "get", "mutant", "validate"]
