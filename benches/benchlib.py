"""What every bench writes beside its figures: the machine they were measured on."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

#: The reference document every bench writes its latest table into.
BENCHMARKS = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"


def machine() -> str:
    """CPU model, cores, kernel and Python, for the line under a table of figures."""
    cpu = platform.processor() or platform.machine() or "unknown CPU"
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Linux {platform.release()}, Python {platform.python_version()}"


def write_section(text: str, before: str | None = "## Cost budget", path: Path = BENCHMARKS) -> None:
    """Replaces the section of ``path`` that ``text`` heads (its first line, a ``## `` heading,
    up to the next one) by ``text``; a section not there yet goes in before the heading
    ``before`` (the first section when ``before`` is None), or at the end."""
    heading = text.splitlines()[0]
    doc = path.read_text()
    pattern = re.compile(re.escape(heading) + r"\n.*?(?=\n## |\Z)", re.S)
    if pattern.search(doc):
        doc = pattern.sub(lambda _: text.rstrip("\n") + "\n", doc)
    else:
        anchor = "\n## " if before is None else "\n" + before
        at = doc.index(anchor) + 1 if anchor in doc else len(doc)
        doc = doc[:at] + text + "\n" + doc[at:]
    path.write_text(doc)
