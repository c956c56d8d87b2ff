"""The shape of crates/xfer: no import loop between its modules, and no source file past
MAX_FILE_LINES.  A module is a file (``send/stripe.rs`` is ``send::stripe``, ``send/mod.rs``
is ``send``); it depends on every module its code names by path: ``crate::a::b``,
``super::x``, or a child of its own by bare name.  A name that is an item, not a module
(``crate::send::StripeCtx``), counts as a use of the module holding it."""

import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "crates" / "xfer" / "src"
MAX_FILE_LINES = 800
ROOT = "crate"
#: comments and string literals: a path named there is not a use
LITERAL = re.compile(r'r(#*)".*?"\1|b?"(\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/', re.S)
PATH = re.compile(r"(?<![\w:])((?:crate|super|self|\w+)(?:\s*::\s*\w+)+)")
GROUP = re.compile(r"(?<![\w:])((?:crate|super|self|\w+)(?:::\w+)*)::\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}")
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)


def module_of(path: Path, src: Path) -> str:
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "mod" or (len(parts) == 1 and parts[0] in ("main", "lib")):
        parts = parts[:-1]
    return "::".join([ROOT, *parts])


def _expand_groups(code: str) -> list[str]:
    """``use a::{b, c::{d, e}}`` as the paths a::b, a::c::d, a::c::e."""
    paths = []
    for m in GROUP.finditer(code):
        head, body = m.group(1), m.group(2)
        depth, item = 0, ""
        items = []
        for ch in body + ",":
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                items.append(item.strip())
                item = ""
            else:
                item += ch
        for it in filter(None, items):
            if "{" in it:
                paths += _expand_groups(f"{head}::{it}")
            else:
                paths.append(f"{head}::{it.split(' as ')[0].strip()}")
    return paths


INLINE_MOD = re.compile(r"(?<![\w:])mod\s+(\w+)\s*\{")


def _inline_mods(code: str) -> tuple[str, list[tuple[str, str]]]:
    """The code without its inline ``mod x { ... }`` blocks, and those blocks (name, body)."""
    blocks = []
    while m := INLINE_MOD.search(code):
        depth, j = 0, m.end() - 1
        for j in range(m.end() - 1, len(code)):
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            if depth == 0:
                break
        blocks.append((m.group(1), code[m.end() : j]))
        code = code[: m.start()] + code[j + 1 :]
    return code, blocks


def _paths(code: str, here: list[str], mods: dict) -> set[str]:
    """The modules of ``mods`` named by ``code``, which sits in module ``here``."""
    code, blocks = _inline_mods(code)
    children = set(MOD_DECL.findall(code))
    found = set()
    for p in _expand_groups(code) + [re.sub(r"\s+", "", x) for x in PATH.findall(code)]:
        parts = p.split("::")
        if parts[0] == "crate":
            parts = [ROOT, *parts[1:]]
        elif parts[0] in ("super", "self"):
            base = list(here)
            while parts and parts[0] in ("super", "self"):
                base, parts = (base[:-1] if parts[0] == "super" else base), parts[1:]
            parts = base + parts
        elif parts[0] in children:
            parts = here + parts
        else:
            continue  # std::, another crate's, a type's associated item
        # the longest prefix that is a module of ours
        for k in range(len(parts), 0, -1):
            if "::".join(parts[:k]) in mods:
                found.add("::".join(parts[:k]))
                break
    for name, body in blocks:  # an inline module (tests) is part of its file's
        found |= _paths(body, here + [name], mods)
    return found


def edges(src: Path = SRC) -> dict[str, set[str]]:
    """Each module → the other modules of the crate it names."""
    mods = {module_of(f, src): f for f in sorted(src.rglob("*.rs"))}
    return {m: _paths(LITERAL.sub(" ", f.read_text()), m.split("::"), mods) - {m} for m, f in mods.items()}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import loop of ``graph`` (its modules in order), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                return stack[stack.index(d) :] + [d]
            if d not in state and (found := visit(d)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_the_scanner_reads_paths_groups_and_children(tmp_path):
    (tmp_path / "send").mkdir()
    (tmp_path / "main.rs").write_text("mod a;\nmod send;\nfn main() { send::go(); }\n")
    (tmp_path / "a.rs").write_text('use crate::{send::{stripe::X, self}};\n// crate::main\nfn f() { "crate::b"; }\n')
    (tmp_path / "send" / "mod.rs").write_text("mod stripe;\npub use stripe::X;\n")
    (tmp_path / "send" / "stripe.rs").write_text("use super::super::a;\npub struct X;\n")
    g = edges(tmp_path)
    assert g == {
        "crate": {"crate::send"},
        "crate::a": {"crate::send", "crate::send::stripe"},
        "crate::send": {"crate::send::stripe"},
        "crate::send::stripe": {"crate::a"},
    }
    loop = cycle(g)
    assert loop[0] == loop[-1] and set(loop) == {"crate::a", "crate::send", "crate::send::stripe"}
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_xfer_modules_import_no_loop():
    g = edges()
    assert len(g) > 10
    assert cycle(g) is None, " -> ".join(cycle(g))


def test_no_xfer_source_file_is_too_long():
    long = {str(f.relative_to(SRC)): n for f in SRC.rglob("*.rs") if (n := len(f.read_text().splitlines())) > MAX_FILE_LINES}
    assert long == {}


if __name__ == "__main__":
    for mod, deps in sorted(edges().items()):
        print(mod, "->", ", ".join(sorted(deps)) or "-")
    print("cycle:", cycle(edges()))
