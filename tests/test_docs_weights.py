"""docs/weights.md is generated from the containers (gate/weights_doc.py): it must equal what the code
renders today, name every field of every container a candidate receives, and cite nothing outside the
repo."""
from __future__ import annotations

import dataclasses
import pathlib

from gate import weights_doc

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "weights.md"


def test_the_reference_is_what_the_containers_render_today():
    assert DOC.read_text() == weights_doc.render(), "docs/weights.md is stale: python3 -m gate.weights_doc > docs/weights.md"


def test_every_field_of_every_container_is_in_the_reference():
    text = DOC.read_text()
    for _, classes in weights_doc.SECTIONS:
        for cls in classes:
            names = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else cls._fields
            missing = [n for n in names if f"`{n}`" not in text.split(f"### `{cls.__name__}`", 1)[1]]
            assert not missing, (cls.__name__, missing)


def test_the_reference_cites_no_document_outside_the_repo():
    text = weights_doc.render()
    for mark in ("SPEC", "§", "NVFP4.md", "SERVING.md", "ARCHITECTURE.md", "TESTING.md"):
        assert mark not in text, mark
    assert weights_doc.uncited("parameters (SPEC §6; names under `x`)") == "parameters (names under `x`)"
    assert weights_doc.uncited("the scores I (SPEC §8.4) of every pool (§8.5)") == "the scores I of every pool"
