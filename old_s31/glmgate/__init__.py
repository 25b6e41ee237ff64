"""glmgate's public API: hold your own kernels to the declared contracts inside your own tests.

Importing `glmgate` imports nothing heavy (no torch, triton or Hypothesis): the names below load their
modules on first use, so the pytest plugin (`glmgate.pytest_plugin`, loaded in every pytest run once
glmgate is installed) costs nothing when it is not asked for.

Judging one comparison
    assert_within_contract(mechanism, path, quantity, candidate, reference, *, baseline=None,
                           baseline_reference=None, held_reference=None, kind="kernel_replacement",
                           dtype="float32") -> Verdict
        Looks up the contract declared for (mechanism, path, quantity, kind) in
        invariants/contracts.d/<mechanism>.toml and judges `candidate` against `reference` (the float64
        oracle's result) under it; arrays may be NumPy or torch, any device. A kernel_replacement
        contract is relative to `baseline` (the same math in plain torch, same dtype, e.g.
        `implementation("torch").kda.chunked(...)`): the limit is k x the baseline's error + floor.
        A broken contract raises AssertionError naming mechanism.path.quantity, the error, the limit,
        the baseline's error, the worst element and the contract's reason. A contract nobody declared
        raises UndeclaredContract listing what is declared for that mechanism.
    contract(mechanism, path, quantity, kind="kernel_replacement") -> Contract
        The declared contract itself (k, floor, bound, reason), or UndeclaredContract.

Building your own @given tests (Hypothesis strategies drawing STRUCTURE, never tensor elements)
    sequence_lengths, chunk_splits, packed_lengths, cu_seqlens, BOUNDARY_LENGTHS   (strategies.sequences)
    SEEDS, families, FAMILIES, core_tensors, initial_state, kda_weights, hidden_states, kda_state
                                                                                    (strategies.tensors)
    kda_geometries, dsa_geometries, KDAGeometry                                     (strategies.geometry)

Running the matrix yourself
    CHECKS, BY_NAME, checks_for(mechanisms)   the check records (invariants.matrix)
    run_check(check, geometry, cand, base, profile, max_examples=None) -> CheckResult
    implementation(name)   "triton", "torch", "mutant:<name>" or your "pkg.mod:obj" (impl.registry.get)
    Target(impl, device, dtype), ORACLE, DTYPES   where an implementation runs (invariants.target)
    Geometry   Geometry.preset("tiny") is what the matrix runs on (oracle.config)
    register_profiles()    the Hypothesis profiles dev / ci / gpu / explore / nightly

Triton on the CPU runs in its interpreter, which reads TRITON_INTERPRET=1 when triton is imported: set
it before anything imports triton (the pytest plugin does, with --glmgate-device cpu).
"""
from __future__ import annotations

import importlib

# name -> (module, attribute): loaded on first access (PEP 562)
_LAZY = {
    **{n: ("strategies.sequences", n) for n in
       ("sequence_lengths", "chunk_splits", "packed_lengths", "cu_seqlens", "BOUNDARY_LENGTHS")},
    **{n: ("strategies.tensors", n) for n in
       ("SEEDS", "families", "FAMILIES", "core_tensors", "initial_state", "kda_weights", "hidden_states",
        "kda_state")},
    **{n: ("strategies.geometry", n) for n in ("kda_geometries", "dsa_geometries", "KDAGeometry")},
    **{n: ("invariants.matrix", n) for n in ("CHECKS", "BY_NAME", "checks_for")},
    **{n: ("invariants.engine", n) for n in ("run_check", "CheckResult")},
    **{n: ("invariants.target", n) for n in ("Target", "ORACLE", "DTYPES")},
    **{n: ("invariants.contracts", n) for n in ("UndeclaredContract", "Contract", "Verdict")},
    "Geometry": ("oracle.config", "Geometry"),
    "register_profiles": ("invariants.profiles", "register"),
}

__all__ = ["assert_within_contract", "contract", "implementation", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'glmgate' has no attribute {name!r}; public names: {', '.join(__all__)}")
    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value          # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


def implementation(name: str):
    """An implementation bundle by name: "triton", "torch", "mutant:<name>" or "pkg.mod:obj" (your
    candidate, imported from the current directory first); ValueError says what exists."""
    from impl import registry
    return registry.get(name)


def contract(mechanism: str, path: str, quantity: str, kind: str = "kernel_replacement"):
    """The contract declared for mechanism.path.quantity[kind]; UndeclaredContract lists the declared ones."""
    from invariants.contracts import UndeclaredContract, load, lookup

    try:
        return lookup(mechanism, path, quantity, kind)
    except UndeclaredContract as e:
        mechanisms = sorted({m for (m, _, _, _) in load()})
        if mechanism not in mechanisms:
            raise UndeclaredContract(f"no contracts are declared for mechanism {mechanism!r}; declared "
                                     f"mechanisms: {', '.join(mechanisms)}") from None
        raise UndeclaredContract(str(e)) from None


def assert_within_contract(mechanism: str, path: str, quantity: str, candidate, reference, *, baseline=None,
                           baseline_reference=None, held_reference=None, kind: str = "kernel_replacement",
                           dtype: str = "float32"):
    """Judge `candidate` against `reference` under the declared contract; return the Verdict, or raise
    AssertionError saying which quantity broke, by how much, where, and why the bound is what it is."""
    __tracebackhide__ = True
    from invariants.compare import Comparison
    from invariants.contracts import judge_comparison

    c = contract(mechanism, path, quantity, kind)
    if kind == "kernel_replacement" and baseline is None:
        raise TypeError(f"{c.key}: a kernel_replacement limit is k x the baseline's error + floor: pass "
                        f"baseline= (the same computation in plain torch in {dtype}, e.g. "
                        f"glmgate.implementation('torch').{mechanism}.{path}(...))")
    v = judge_comparison(c, dtype, Comparison(path, quantity, candidate, reference, baseline, kind,
                                              baseline_reference, held_reference=held_reference))
    if not v.ok:
        raise AssertionError(_broken(v))
    return v


def _broken(v) -> str:
    from invariants.contracts import declared_in
    from invariants.report import describe

    c = v.contract
    lines = [describe(v)]
    if c.kind == "kernel_replacement":
        floor = c.floor.get(v.dtype)
        lines.append(f"limit = {c.k:g} x the baseline's error {v.baseline_err:.3g} + floor {floor:g}"
                     + (" (the baseline's error was above its cap: the cap was used)" if v.ill_conditioned else ""))
    lines.append(f"contract {c.key} ({declared_in(c.mechanism)}): {c.reason}")
    return "\n".join(lines)
