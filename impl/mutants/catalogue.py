"""The mutant record, the table, the `@mutant` decorator that fills it and its validation, and
`kernel_edited`: the product's kernel with one planted source edit, for mutants of a kernel's own code."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import linecache
import re
from typing import Callable, Iterable, Optional


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One planted bug.

    Args:
        name: the catalogue key ("kda_tail_chunk_dropped")
        check: the exact name of the check that must catch it ("kda.chunked"), a record of
            invariants/matrix.py CHECKS
        quantity: the contract quantity it breaks ("output"), one the check's mechanism declares in
            invariants/contracts.d/<mechanism>.toml
        description: one line saying what is wrong
        factory: zero-arg callable building what replaces the mechanism's namespace of `base`
            (an object with TorchKDA's methods; for a serving mutant the Engine class itself)
        cls: the class that plants the bug
        dtype: None: the zoo runs the mutant in the run's dtype (float32 on the CPU, bfloat16 on a
            GPU); a dtype name ("float32"): the quantity is a contract of that dtype, so the zoo runs it
            in that dtype on every device (a bf16 run cannot resolve the bug below its own rounding)
        base: the implementation (impl/registry.py) whose other namespaces the mutant keeps
        device: None: caught on every device; "cuda": the bug needs sizes only a GPU affords (its check's
            CUDA pins, Check.gpu_examples / nightly_examples, show it), or sits in a path only a GPU runs
            (inline PTX): the CPU zoo and suite list it as GPU-only instead of running it, and
            `glmgate zoo --device cuda` replays those pins
        namespace: the namespace the class replaces when it is not the check's mechanism (a bug in the
            moe namespace's NVFP4 kernels that only nvfp4.gate's NVFP4 layers show); None: the mechanism
    """

    name: str
    check: str
    quantity: str
    description: str
    factory: Callable[[], object]
    cls: type
    dtype: Optional[str] = None
    base: str = "torch"
    device: Optional[str] = None
    namespace: Optional[str] = None

    @property
    def mechanism(self) -> str:
        """The mechanism whose check catches it ("kda"), "model" or "serving"."""
        return self.check.split(".", 1)[0]

    @property
    def target(self) -> str:
        """The registry.Implementation field its class replaces: `namespace`, else the mechanism."""
        return self.namespace or self.mechanism

    @property
    def origin(self) -> str:
        return f"{self.cls.__module__}.{self.cls.__qualname__}"


MUTANTS: dict[str, Mutant] = {}


def snake_name(cls: type, mechanism: str) -> str:
    """"<mechanism>_<class name in snake case>", the mechanism not repeated when the class name starts
    with it: DsaTailOffByOne -> dsa_tail_off_by_one, QNotScaled (kda) -> kda_q_not_scaled,
    Nvfp4W4A4InputScaleDecodeDirection -> nvfp4_w4a4_input_scale_decode_direction."""
    stem = cls.__name__
    if stem.lower().startswith(mechanism) and stem[len(mechanism):][:1].isupper():
        stem = stem[len(mechanism):]
    # a word starts at a capital after a lower-case letter, or at a capital followed by one (so that
    # "QNot" is q_not while "W4A4" stays one word)
    return f"{mechanism}_" + re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=.)(?=[A-Z][a-z])", "_", stem).lower()


def mutant(check: str, quantity: str, *, name: Optional[str] = None, dtype: Optional[str] = None,
           factory: Optional[Callable[[type], object]] = None, base: str = "torch",
           table: Optional[dict] = None, device: Optional[str] = None, namespace: Optional[str] = None):
    """Class decorator: register the class as the planted bug that `check` must catch through `quantity`.

    Args:
        check: the exact name of the designated check ("kda.chunked"), validated against invariants/
            matrix.py CHECKS by `validate` when the matrix is built
        quantity: the contract quantity it breaks ("final_state")
        name: the catalogue key; derived by `snake_name` when left out
        dtype: Mutant.dtype (a mutant only a contract of that dtype resolves)
        factory: builds the implementation object from the class; the class called with no argument
            when left out
        base: Mutant.base
        table: the table to register in, MUTANTS when left out (tests register into a scratch dict)
        device: Mutant.device
        namespace: Mutant.namespace
    """
    if check.count(".") != 1 or "." in quantity:
        raise ValueError(f"@mutant({check!r}, {quantity!r}): expected a check 'mechanism.path' and a quantity")

    def register(cls: type) -> type:
        key = name or snake_name(cls, check.split(".", 1)[0])
        doc = (cls.__doc__ or "").strip()
        if not doc or "\n" in doc:
            raise ValueError(f"mutant {key} ({cls.__qualname__}): its docstring must be ONE line saying what is "
                             f"wrong (it is the zoo's description); got {doc!r}")
        into = MUTANTS if table is None else table
        if key in MUTANTS or key in into:
            raise ValueError(f"mutant {key} ({cls.__qualname__}): the name is already registered")
        build = cls if factory is None else functools.partial(factory, cls)
        if device not in (None, "cuda"):
            raise ValueError(f"mutant {key}: device {device!r}, expected None or 'cuda'")
        into[key] = Mutant(key, check, quantity, doc, build, cls, dtype, base, device, namespace)
        return cls

    return register


def validate(checks: Iterable, table: Optional[dict] = None) -> None:
    """Raise ValueError naming every mutant of `table` (MUTANTS) whose check is not EXACTLY the name of
    one of `checks` (invariants/matrix.py Check records), or whose quantity that check's mechanism
    declares no contract for (invariants/contracts.d/<mechanism>.toml)."""
    # imported here: impl/ must not need invariants/ to import, and invariants/matrix.py calls this
    from invariants.contracts import load

    by_name = {c.name: c for c in checks}
    declared: dict[str, set] = {}
    for mech, _path, qty, _kind in load():
        declared.setdefault(mech, set()).add(qty)
    wrong = []
    for m in (MUTANTS if table is None else table).values():
        chk = by_name.get(m.check)
        if chk is None:
            wrong.append(f"mutant {m.name} ({m.origin}): check {m.check!r} is not a check of the matrix "
                         f"(expected one of {sorted(by_name)})")
        elif chk.mechanism != m.mechanism:
            wrong.append(f"mutant {m.name} ({m.origin}): check {m.check!r} runs mechanism {chk.mechanism!r}, "
                         f"not {m.mechanism!r}")
        elif m.device == "cuda" and not (getattr(chk, "gpu_examples", ()) or getattr(chk, "nightly_examples", ())):
            wrong.append(f"mutant {m.name} ({m.origin}): GPU-only, but check {m.check!r} pins no CUDA case "
                         f"(gpu_examples / nightly_examples) that could show it")
        elif m.quantity not in declared.get(chk.mechanism, ()):
            wrong.append(f"mutant {m.name} ({m.origin}): quantity {m.quantity!r} has no contract of mechanism "
                         f"{chk.mechanism!r} (declared: {sorted(declared.get(chk.mechanism, ()))})")
    if wrong:
        raise ValueError("planted mutants name no catcher that exists:\n  " + "\n  ".join(wrong))


def flip_last_bits(t):
    """t with the last mantissa bit of a random half of its elements flipped: what summing partial
    results by atomics in arrival order leaves (the bit of the output dtype, or of a float32 accumulator
    when the output is float64)."""
    import torch

    bits, lsb = {torch.bfloat16: (torch.int16, 1), torch.float16: (torch.int16, 1), torch.float32: (torch.int32, 1),
                 torch.float64: (torch.int64, 1 << 29)}[t.dtype]
    # made on the output's own bits: noise added in float32 and cast back rounds away in bf16
    flip = torch.randint(0, 2, t.shape, device=t.device, dtype=bits) * lsb
    return (t.contiguous().view(bits) ^ flip).view(t.dtype)


def get(name: str) -> Mutant:
    """The catalogue entry `name`; KeyError listing the known names otherwise."""
    try:
        return MUTANTS[name]
    except (KeyError, TypeError):
        raise KeyError(f"unknown mutant {name!r}: expected one of {sorted(MUTANTS)}") from None


@functools.lru_cache(maxsize=None)
def _edited(kernel, old: str, new: str, scope: tuple = (), rename: str = ""):
    """A new @triton.jit kernel: `kernel`'s own source with the text `old` (found exactly once) replaced;
    scope: (name, value) pairs added to its globals (an edited helper or constant the new text names, or a
    callee it already names, replaced: then `old` may be None, no text edit of its own);
    rename: the new function's name (its def renamed), else the kernel's own."""
    src = inspect.getsource(kernel.fn)
    name = kernel.fn.__name__
    if old is None:
        if not scope:
            raise ValueError(f"{name}: a planted edit needs a text edit or a replaced callee (scope)")
    else:
        if src.count(old) != 1:
            raise ValueError(f"{name}: the planted edit's text {old!r} occurs {src.count(old)} times in its "
                             f"source, expected once (the kernel changed: update the edit)")
        src = src.replace(old, new)
    if rename:
        src = src.replace(f"def {name}(", f"def {rename}(", 1)
        name = rename
    # triton reads a kernel's source back through inspect: register the edited text under its own name
    filename = f"<{name} with a planted edit {len(linecache.cache)}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    env = dict(kernel.fn.__globals__)
    env.update(scope)
    exec(compile(src, filename, "exec"), env)
    return env[name]


@contextlib.contextmanager
def kernel_edited(module, name: str, old: str, new: str, scope: tuple = ()):
    """Within the block, `module`'s kernel `name` (what its host wrappers launch) is a copy whose source
    has the text `old` replaced by `new`: a kernel mutant is the product's wrapper launching the product's
    kernel with one planted edit, so the bug sits in the code path that ships. scope: (name, value)
    pairs the new text may name (an edited jit helper, from `edited_helper`), or a callee the kernel names
    replaced by its edited copy everywhere it is called (then old and new are None: the edit is the callee's)."""
    kernel = getattr(module, name)
    setattr(module, name, _edited(kernel, old, new, scope))
    try:
        yield
    finally:
        setattr(module, name, kernel)


def edited_helper(helper, old: str, new: str, scope: tuple = ()):
    """A @triton.jit helper (a kernel's callee) with one planted edit, as `kernel_edited` makes a kernel's:
    hand it to kernel_edited's scope under a new name and edit the kernel's call to use that name.

    The copy is renamed (`<name>_planted`): a GPU compile names a called helper by its module and name, so
    where the kernel calls the original helper too, a copy under the same name would be compiled once and
    both calls would run whichever came first (stop 42: on Triton 3.6 the planted FTZ exp ran ours' code and
    its mutant escaped; the interpreter calls each Python function as it is and never showed it)."""
    return _edited(helper, old, new, scope, rename=f"{helper.fn.__name__}_planted")
