"""The house rules that a reader relies on, checked (docs/architecture.md): imports at module
level (an exception says why, on the line), no private name taken from another module, and
functions short enough to read at once."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "python" / "xferlab"
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))
#: Functions longer than this need a reason written in their body (a "# long:" comment).
MAX_LINES = 80


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def test_functions_are_short_enough_to_read_at_once():
    long = []
    for path in MODULES:
        lines = path.read_text().splitlines()
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                body = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                if n > MAX_LINES and "# long:" not in body:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({n} lines)")
    assert long == []


def test_no_private_name_is_imported_from_another_module():
    private = []
    for path in MODULES:
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.module not in (None, "__future__"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__") and alias.name != "_sim":
                        private.append(f"{path.relative_to(PACKAGE)}: from {node.module} import {alias.name}")
    assert private == []


def test_imports_are_at_module_level_or_say_why():
    hidden = []
    for path in MODULES:
        lines = path.read_text().splitlines()
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        line = lines[inner.lineno - 1]
                        above = lines[inner.lineno - 2] if inner.lineno > 1 else ""
                        if not re.search(r"#.+", line) and "#" not in above:
                            hidden.append(f"{path.relative_to(PACKAGE)}:{inner.lineno}: {line.strip()}")
    assert hidden == []
