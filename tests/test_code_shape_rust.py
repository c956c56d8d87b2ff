"""The Rust side of tests/test_code_shape.py: functions in ``crates/*/src`` short enough to
read at once, the same bound as the Python's.  A longer one needs its reason written in it
(a ``// long:`` comment)."""

import re
from pathlib import Path

from test_code_shape import MAX_LINES

CRATES = Path(__file__).resolve().parent.parent / "crates"
SOURCES = sorted(CRATES.glob("*/src/**/*.rs"))
FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"C\"\s+)?fn\s+(\w+)")
#: string, raw string, char literals and comments: their braces are not the code's
LITERAL = re.compile(r'r(#*)".*?"\1|b?"(\\.|[^"\\])*"|b?\'(\\.|[^\\\'])\'|//[^\n]*|/\*.*?\*/', re.S)


def _blank(m: re.Match) -> str:
    return re.sub(r"[^\n]", " ", m.group(0))


def functions(text: str) -> list[tuple[str, int, int]]:
    """(name, first line, line count) of each top-level or method ``fn`` with a body; nested
    fns count in their parent."""
    code = LITERAL.sub(_blank, text).splitlines()
    found, i = [], 0
    while i < len(code):
        m = FN.match(code[i])
        if not m:
            i += 1
            continue
        depth, j, opened = 0, i, False
        while j < len(code):
            if not opened and ";" in code[j] and "{" not in code[j]:
                break  # a declaration without a body (trait method, extern)
            depth += code[j].count("{") - code[j].count("}")
            opened = opened or "{" in code[j]
            if opened and depth <= 0:
                break
            j += 1
        if opened:
            found.append((m.group(7), i + 1, j - i + 1))
        i = j + 1
    return found


def test_the_scanner_sees_braces_in_code_only():
    text = "fn a() {\n    let s = \"}}}\";\n    let c = '{';\n    // }\n    x\n}\nfn b() -> u8;\nfn c<'a>(x: &'a str) {\n}\n"
    assert functions(text) == [("a", 1, 6), ("c", 8, 2)]


def test_rust_functions_are_short_enough_to_read_at_once():
    long = []
    for path in SOURCES:
        text = path.read_text()
        lines = text.splitlines()
        for name, first, n in functions(text):
            body = "\n".join(lines[first - 1 : first - 1 + n])
            if n > MAX_LINES and "// long:" not in body:
                long.append(f"{path.relative_to(CRATES)}:{first} {name} ({n} lines)")
    assert long == []
