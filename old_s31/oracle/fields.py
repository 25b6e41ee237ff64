"""How a weight container declares its arrays: one `weight(...)` per field, the rest derived (no math).

A declaration, written once on the container's dataclass field (oracle/types.py), says:
  shape    in the container's legend letters, e.g. "[H·K, D]" ("·" multiplies; +, -, /, parentheses)
  disk     its SPEC §11 name under the container's checkpoint prefix as transformers saves it
           ("q_proj.weight"), or `Parts` when it is saved as several tensors joined on load
  module   the SPEC §11 module name the loader groups it under, where that differs from `disk`
  f32      kept in float32 when the model runs in a lower working dtype (SPEC §11)
  init     how a random checkpoint draws it (FAN_IN, NORM, INERT, EMBED: SPEC §13)
  when     the Geometry flag without which a checkpoint lacks it (the field is then None)
  squeeze  an axis the checkpoint has and the container drops (conv1d's [C, 1, W] for [C, W])

`part(...)` declares a sub-container field the same way (its module and on-disk name prefixes).
Derived here: `Declared.map` / `cast_arrays` (conversion to another array type, dtype, device) and
`check_shapes` (the containers' `validate`); oracle/checkpoint_names.py derives the name table.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import operator
from typing import Any, Callable, Mapping, Optional, Union

FAN_IN, NORM, INERT, EMBED = "fan_in", "norm", "inert", "embed"
_WEIGHT, _PART = "glmgate.weight", "glmgate.part"


@dataclasses.dataclass(frozen=True)
class Parts:
    """A field transformers saves as several tensors, concatenated along axis 0 on load.

    names: the on-disk leaves in order; names holding "{e}" repeat for every routed expert e and
           each expert's concatenation is stacked (the [E, ...] module tensor)
    shape: each part's shape in the legend letters
    """

    names: tuple[str, ...]
    shape: str

    @property
    def per_expert(self) -> bool:
        return "{e}" in self.names[0]


@dataclasses.dataclass(frozen=True)
class Field:
    """One array field's declaration (module docstring); `name` is the dataclass field's."""

    shape: str
    disk: Union[str, Parts]
    module: Optional[str] = None
    f32: bool = False
    init: str = FAN_IN
    when: Optional[str] = None
    squeeze: Optional[int] = None
    name: str = ""

    @property
    def optional(self) -> bool:
        """A field a checkpoint may lack holds None then."""
        return self.when is not None

    @property
    def module_name(self) -> str:
        return self.module if self.module is not None else self.disk

    @property
    def stored_shape(self) -> str:
        """The shape on disk and under the module name: `shape` with squeeze's unit axis put back."""
        if self.squeeze is None:
            return self.shape
        axes = self.shape[1:-1].split(", ")
        return "[" + ", ".join(axes[:self.squeeze] + ["1"] + axes[self.squeeze:]) + "]"


@dataclasses.dataclass(frozen=True)
class Part:
    """A sub-container field: its module-name prefix and on-disk prefix ("attn_hc." / "hc_attn_")."""

    module: str
    disk: str
    name: str = ""


def weight(shape: str, disk: Union[str, Parts], *, module: Optional[str] = None, f32: bool = False,
           init: str = FAN_IN, when: Optional[str] = None, squeeze: Optional[int] = None,
           default: Any = dataclasses.MISSING):
    """The dataclass field of one weight array, carrying its declaration."""
    decl = Field(shape, disk, module, f32, init, when, squeeze)
    return dataclasses.field(default=default, metadata={_WEIGHT: decl})


def part(module: str, disk: Optional[str] = None):
    """The dataclass field of a sub-container (or a tuple of them) under `module` (`disk` on disk)."""
    return dataclasses.field(metadata={_PART: Part(module, module if disk is None else disk)})


@functools.lru_cache(maxsize=None)
def _declarations(cls, key: str) -> tuple:
    return tuple(dataclasses.replace(f.metadata[key], name=f.name) for f in dataclasses.fields(cls)
                 if key in f.metadata)


def declared(cls) -> tuple[Field, ...]:
    """The array fields of container class `cls`, in field order."""
    return _declarations(cls, _WEIGHT)


def parts(cls) -> tuple[Part, ...]:
    """The sub-container fields of `cls`, in field order."""
    return _declarations(cls, _PART)


# ----------------------------------------------------------------------------- shapes


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


@functools.lru_cache(maxsize=None)
def _parse(shape: str) -> tuple:
    tree = ast.parse(shape.replace("·", "*"), mode="eval").body
    if not isinstance(tree, ast.List):
        raise ValueError(f"shape {shape!r}: expected a bracketed list of dims")
    return tuple(tree.elts)


def _value(node, letters: Mapping[str, int], shape: str) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        return int(letters[node.id])
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left, letters, shape), _value(node.right, letters, shape))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        a, b = _value(node.left, letters, shape), _value(node.right, letters, shape)
        if a % b:
            raise ValueError(f"shape {shape}: {a}/{b} is not a whole number of elements")
        return a // b
    raise ValueError(f"shape {shape!r}: {ast.unparse(node)} is not letters, integers, +, -, · and /")


def dims(shape: str, letters: Mapping[str, int]) -> tuple[int, ...]:
    """The integer shape of a declared shape string, e.g. dims("[H·K, D]", {"H": 2, "K": 4, "D": 8}) = (8, 8)."""
    return tuple(_value(e, letters, shape) for e in _parse(shape))


def letters_in(shape: str) -> tuple[str, ...]:
    """The legend letters a shape string uses, in order of first appearance."""
    names = (n.id for e in _parse(shape) for n in ast.walk(e) if isinstance(n, ast.Name))
    return tuple(dict.fromkeys(names))


def legend(letters: Mapping[str, Optional[int]], only: Optional[tuple[str, ...]] = None) -> str:
    """"H=2, K=4, D=8": the letters' values (those in `only`, else every one that is set)."""
    keys = only if only is not None else [k for k, v in letters.items() if v is not None]
    return ", ".join(f"{k}={letters[k]}" for k in keys)


def check_positive(obj, ints: tuple[str, ...] = (), floats: tuple[str, ...] = ()) -> None:
    """The named scalar fields of `obj` are positive ints / positive numbers; ValueError naming the field."""
    for name in ints + floats:
        value = getattr(obj, name)
        kinds, what = ((int,), "a positive int") if name in ints else ((int, float), "a positive float")
        if not isinstance(value, kinds) or isinstance(value, bool) or not value > 0:
            raise ValueError(f"{type(obj).__name__}.{name}: {value!r}, expected {what}")


def check_shapes(obj, letters: Mapping[str, Optional[int]]) -> None:
    """Every declared array of `obj` against its shape under `letters`; ValueError naming the field.

    A field a checkpoint may lack (`when`) is checked only where present.
    """
    owner = type(obj).__name__
    for f in declared(type(obj)):
        a = getattr(obj, f.name)
        if a is None and f.optional:
            continue
        want = dims(f.shape, letters)
        got = None if a is None else tuple(a.shape)
        if got != want:
            raise ValueError(f"{owner}.{f.name}: shape {got}, expected {want} = {f.shape} ({legend(letters)})")


# ----------------------------------------------------------------------------- conversion


class Declared:
    """Base of the weight containers: `map` over their declared arrays."""

    def map(self, fn: Callable[[Any], Any]):
        """This container with `fn` applied to every declared array (e.g. to move to torch, a device, a
        dtype); optional ones only where present, sub-containers' too, scalars and NVFP4 codes untouched."""
        return cast_arrays(self, lambda a, f32: fn(a))


def cast_arrays(obj, cast: Callable[[Any, bool], Any]):
    """`obj` and its sub-containers with every declared array a = cast(a, f32): f32 says whether the
    declaration keeps it in float32 whatever the working dtype. Undeclared fields stay as they are."""
    def sub(v):
        if v is None:
            return None
        if isinstance(v, tuple):
            return tuple(sub(x) for x in v)
        return cast_arrays(v, cast)

    arrays = {f.name: cast(getattr(obj, f.name), f.f32) for f in declared(type(obj))
              if not (f.optional and getattr(obj, f.name) is None)}
    return dataclasses.replace(obj, **arrays, **{p.name: sub(getattr(obj, p.name)) for p in parts(type(obj))})
