"""What every bench writes beside its figures: the machine they were measured on."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def machine() -> str:
    """CPU model, cores, kernel and Python, for the line under a table of figures."""
    cpu = platform.processor() or platform.machine() or "unknown CPU"
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Linux {platform.release()}, Python {platform.python_version()}"
