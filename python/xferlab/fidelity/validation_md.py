"""VALIDATION.md's tables: each between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->``
markers, rewritten by the bench that makes it (the prose around them is kept) and read back
by those that reuse it."""

from __future__ import annotations

import re

from .settings import ROOT

PATH = ROOT / "VALIDATION.md"


def block(text: str, name: str) -> str:
    """What a document's ``text`` holds between table ``name``'s markers; an error if it has
    no such table."""
    found = re.search(rf"<!-- table:{name} -->(.*?)<!-- /table:{name} -->", text, re.S)
    if found is None:
        raise ValueError(f"no <!-- table:{name} --> block")
    return found.group(1)


def write(name: str, table: str) -> None:
    """Table ``name`` rewritten in VALIDATION.md as ``table``, or appended at its end (and
    said) if it had none."""
    text = PATH.read_text() if PATH.exists() else "# Validation\n"
    new = f"<!-- table:{name} -->\n{table}\n<!-- /table:{name} -->"
    pattern = re.compile(rf"<!-- table:{name} -->.*?<!-- /table:{name} -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: new, text)
    else:
        text = text.rstrip("\n") + f"\n\n{new}\n"
        print(f"VALIDATION.md had no <!-- table:{name} --> block: appended at the end; move it where it belongs", flush=True)
    PATH.write_text(text)
