"""VALIDATION.md's tables: each between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->``
markers, rewritten by the bench that makes it (the prose around them is kept) and read back
by those that reuse it. A table lives in VALIDATION.md itself (the short ones) or, in full,
in ``docs/validation/NAME.md``, which VALIDATION.md links to; the markers say which."""

from __future__ import annotations

import re
from pathlib import Path

from .settings import ROOT

PATH = ROOT / "VALIDATION.md"
#: The full tables VALIDATION.md links to, a file each: ``NAME.md`` holds table ``NAME``.
TABLES = ROOT / "docs" / "validation"


def block(text: str, name: str) -> str:
    """What a document's ``text`` holds between table ``name``'s markers; an error if it has
    no such table."""
    found = re.search(rf"<!-- table:{name} -->(.*?)<!-- /table:{name} -->", text, re.S)
    if found is None:
        raise ValueError(f"no <!-- table:{name} --> block")
    return found.group(1)


def documents(name: str) -> list[Path]:
    """Where table ``name`` may live, in the order looked at: its own file, then VALIDATION.md."""
    return [TABLES / f"{name}.md", PATH]


def where(name: str) -> Path:
    """The document holding table ``name``'s markers; its own file (made at the first write)
    if none does yet."""
    for path in documents(name):
        if path.exists() and f"<!-- table:{name} -->" in path.read_text():
            return path
    return documents(name)[0]


def read(name: str) -> str:
    """Table ``name`` as its document holds it (between its markers); an error if none does."""
    path = where(name)
    return block(path.read_text() if path.exists() else "", name)


def write(name: str, table: str) -> None:
    """Table ``name`` rewritten where it lives as ``table``; a table that lives nowhere yet is
    appended to its own file, made if need be (and it is said)."""
    path = where(name)
    text = path.read_text() if path.exists() else f"# Table {name}\n\nGenerated; VALIDATION.md does not link to it yet.\n"
    new = f"<!-- table:{name} -->\n{table}\n<!-- /table:{name} -->"
    pattern = re.compile(rf"<!-- table:{name} -->.*?<!-- /table:{name} -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: new, text)
    else:
        text = text.rstrip("\n") + f"\n\n{new}\n"
        print(f"table {name} had no block: appended to {path}; link it from VALIDATION.md", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
