"""docs/weights.md, generated from the containers themselves (oracle/types.py): what a candidate's
functions receive and return (weights, states, caches, decisions), field by field, with the shapes
declared on the fields (oracle/fields.py). tests/test_docs_weights.py holds the file equal to
`render()`, so the reference cannot drift from the code; `python3 -m gate.weights_doc > docs/weights.md`
rewrites it.

The containers' docstrings cite the specification the team works from; a user has no copy of it, so
those citations are dropped here (the rest of each docstring is kept word for word).
"""
from __future__ import annotations

import dataclasses
import inspect
import re

from oracle import fields, types

# (section, containers) in the order a reader meets them, mechanism by mechanism
SECTIONS = (
    ("KDA", (types.KDAWeights, types.KDAState)),
    ("MLA and the DSA indexer", (types.MLAWeights, types.IndexerWeights, types.DSACache, types.Selection)),
    ("mHC", (types.MHCWeights,)),
    ("MoE", (types.MoEWeights, types.DenseMLPWeights, types.Routing)),
    ("NVFP4", (types.NVFP4Tensor, types.NVFP4Experts)),
)
# "(SPEC §6; names under ...)", "SPEC §8.3-8.7", "§8.8", "NVFP4.md A5", "SERVING.md P4", "pitfall 9"
_CITE = re.compile(r"(?:SPEC\s*)?§\d+(?:\.\d+)*(?:\s*[-–,/]\s*§?\d+(?:\.\d+)*)*(?:\s*pitfalls?\s*[\d, -]+)?"
                   r"|(?:NVFP4|SERVING|TESTING|ARCHITECTURE)\.md(?:\s*[A-Z]\d+(?:\.\d+)*(?:\s*[-,]\s*[A-Z]?\d+)*)?"
                   r"|`DynamicIndexedLayer`")


def uncited(text: str) -> str:
    """`text` without citations of documents outside the repo, and the punctuation they leave."""
    t = _CITE.sub("", text)
    t = re.sub(r"\(\s*[;,]\s*", "(", t)
    t = re.sub(r"\s*[;,]\s*\)", ")", t)
    t = re.sub(r"\s*\(\s*\)", "", t)
    return re.sub(r"(?<=\S)[ \t]+([,.;:)])", r"\1", t)


def _legend() -> list[str]:
    """The shape letters: the module docstring's and each section comment's `Letters:` lines."""
    src = inspect.getsource(types)
    out = [" ".join(types.__doc__.split("Letters:", 1)[1].split("\n\n", 1)[0].split())]
    for m in re.finditer(r"^# Letters: (.+(?:\n# (?!-).+)*)", src, re.M):
        out.append(" ".join(line.lstrip("# ").strip() for line in m.group(0).removeprefix("# Letters: ").split("\n")))
    return [f"- {uncited(line)}" for line in out]


def _declared_table(cls) -> list[str]:
    rows = ["| field | shape | notes |", "|---|---|---|"]
    array = {f.name: f for f in fields.declared(cls)}
    for f in dataclasses.fields(cls):
        if f.name in array:
            d = array[f.name]
            notes = [n for n, on in (("kept in float32 in a lower working dtype", d.f32),
                                     (f"None unless the config sets `{d.when}`", d.when)) if on]
            rows.append(f"| `{f.name}` | `{d.shape}` | {'; '.join(notes)} |")
        else:
            kind = getattr(f.type, "__name__", str(f.type)).replace("Optional[", "").rstrip("]")
            rows.append(f"| `{f.name}` | ({kind}) | |")
    return rows


def _section(cls) -> list[str]:
    doc = inspect.cleandoc(cls.__doc__ or "")
    head, _, body = doc.partition("\n")
    out = [f"### `{cls.__name__}`", "", uncited(head).strip(), ""]
    if body.strip():
        out += ["```", uncited(inspect.cleandoc(body)), "```", ""]
    if dataclasses.is_dataclass(cls):
        out += _declared_table(cls) + [""]
    else:
        out += [f"Fields, in order: {', '.join(f'`{n}`' for n in cls._fields)}.", ""]
    return out


def render() -> str:
    out = ["# What the functions receive: weights, states, caches, decisions", "",
           "Generated from `oracle/types.py` by `python3 -m gate.weights_doc` (a test keeps it equal to",
           "the code). The same containers hold float64 NumPy arrays on the oracle side and torch tensors",
           "(on the run's device, in its working dtype unless a field says float32) for a candidate. A",
           "shape is written in the letters below; `·` multiplies.", "", "## Shape letters", ""]
    out += _legend() + [""]
    for title, classes in SECTIONS:
        out += [f"## {title}", ""]
        for cls in classes:
            out += _section(cls)
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
