"""Reading the YAML files users write (scenarios, campaigns) without trusting them.

A data file must be a small regular file of plain data: mappings with text keys, lists,
text, numbers, booleans and nulls. Everything else is refused with a message that names
the file and the place, before any other code sees it:

* not a regular file (``/dev/zero``, a FIFO), or larger than :data:`MAX_FILE_BYTES`;
* YAML that does not parse, nests deeper than :data:`MAX_DEPTH`, or expands (through
  aliases: the "billion laughs") to more than :data:`MAX_VALUES` values;
* a key given twice in one mapping (YAML forbids it; PyYAML would keep the last silently),
  named with both lines;
* values that are not plain data (``!!binary``, sets, timestamps are turned into text so
  that the field that receives one says what it expected), keys that are not text,
  numbers that are not finite, integers of more than :data:`MAX_INT_DIGITS` digits.
  (A YAML integer of over 4 300 digits is refused by Python itself, with its message.)

Numbers in exponent form are numbers, as YAML 1.2 reads them (``1e-4``, ``1E5``, ``+1e3``,
``.5e2``; YAML 1.1, which PyYAML follows, wants a dot and a signed exponent and hands the
others over as text), and a whole one is an integer (``pairs: 1e3``, ``volume: 1e9``).

The result is a fresh tree of dicts and lists (no shared nodes), safe to copy, hash and
write as JSON.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

#: A scenario or campaign file is a page or two of YAML; 4 MiB leaves room for a per-pair
#: list of 100 000 pairs and stops a mistaken path (a trace, a disk image) at once.
MAX_FILE_BYTES = 4 * 2**20
#: Scenarios nest four levels deep; a campaign's inline scenario six.
MAX_DEPTH = 32
#: Values after alias expansion (every scalar and container counts one).
MAX_VALUES = 500_000
#: Digits of an integer (a seed is below 2**63: 19 digits).
MAX_INT_DIGITS = 40


class DataFileError(ValueError):
    """A data file that is not plain data; the message names the file and the place.
    ``errno``: the system's reason when it could not be read (EACCES, EIO, …), else None."""

    def __init__(self, message: str, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping that gives one key twice (its mark is the second one's)."""

    def __init__(self, key: Any, first: yaml.Mark, second: yaml.Mark):
        super().__init__(None, None, f"key {key!r} is given twice (first on line {first.line + 1})", second)
        self.key, self.first = key, first


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The safe loader with YAML 1.2's numbers in exponent form, refusing duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue  # a merge (<<) may be overridden; a non-text key is refused later
            key = self.construct_object(key_node)
            if key in seen:
                raise DuplicateKeyError(key, seen[key], key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


#: A number in exponent form, as YAML 1.2 writes it (the core schema's float with an
#: exponent): YAML 1.1's resolver wants a dot and a signed exponent and misses the rest.
_EXPONENT = re.compile(r"^[-+]?(?:\.[0-9][0-9_]*|[0-9][0-9_]*(?:\.[0-9_]*)?)[eE][-+]?[0-9]+$")
_EXPONENT_TAG = "tag:xferlab,2024:exponent"


def _construct_exponent(loader: _Loader, node: yaml.ScalarNode) -> int | float:
    """``1e-4`` → 0.0001; a whole number (``1e3``, ``2.5e3``) → an int, as a person who
    writes ``pairs: 1e3`` or ``volume: 1e9`` means it (integer fields do not take 1000.0).
    Beyond :data:`MAX_INT_DIGITS` digits it stays a float (and an overflow is refused)."""
    text = loader.construct_scalar(node).replace("_", "")
    exact = decimal.Decimal(text)
    if exact == exact.to_integral_value() and exact.adjusted() < MAX_INT_DIGITS:
        return int(exact)
    return float(text)


_Loader.add_implicit_resolver(_EXPONENT_TAG, _EXPONENT, list("-+.0123456789"))
for _first in "-+.0123456789":  # ahead of YAML 1.1's float, which takes 1.0e+3 otherwise
    _Loader.yaml_implicit_resolvers[_first].insert(0, _Loader.yaml_implicit_resolvers[_first].pop())
_Loader.add_constructor(_EXPONENT_TAG, _construct_exponent)


def read_text(path: str | Path, what: str = "file", max_bytes: int = MAX_FILE_BYTES) -> str:
    """The text of a regular file of at most ``max_bytes``, or :class:`DataFileError`
    saying why not (a device, a folder, a FIFO, too large, not UTF-8)."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise DataFileError(f"{p}: no such file") from None
    except OSError as e:
        raise DataFileError(f"{p}: cannot read: {e.strerror or e}", e.errno) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise DataFileError(f"{p}: {kind}; expected a {what}")
        if st.st_size > max_bytes:
            raise DataFileError(f"{p}: {st.st_size} bytes; a {what} is at most {max_bytes // 2**20} MiB")
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(max_bytes + 1)
    except OSError as e:
        raise DataFileError(f"{p}: cannot read: {e.strerror or e}", e.errno) from None
    finally:
        os.close(fd)
    if len(raw) > max_bytes:  # a file that grew while read
        raise DataFileError(f"{p}: more than {max_bytes // 2**20} MiB; a {what} is at most that")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataFileError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start}); expected a {what}") from None


def too_deep(where: str, mark: yaml.Mark | None = None) -> DataFileError:
    """The one refusal of deep nesting, wherever it is met (our event-stream check, PyYAML's
    own limit, the constructor's recursion, the copy into plain data)."""
    line = f" (line {mark.line + 1})" if mark is not None else ""
    return DataFileError(f"{where}: nested too deeply{line}; at most {MAX_DEPTH} levels")


def _check_depth(text: str, source: str) -> None:
    """Refuses deep nesting from the event stream, before anything recursive sees it (the
    loader's constructor recurses, and crashes the interpreter at some 10⁵ levels)."""
    depth = 0
    for ev in yaml.parse(text, Loader=_Loader):
        if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise too_deep(source, ev.start_mark)
        elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1


def parse(text: str, source: str) -> Any:
    """Plain data from YAML text (see the module's rules)."""
    try:
        _check_depth(text, source)
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader
    except DataFileError:
        raise
    except DuplicateKeyError as e:
        raise DataFileError(
            f"{source}: line {e.problem_mark.line + 1}: {e.key!r} is given twice (first on line {e.first.line + 1}); keep one"
        ) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        if "nesting depth" in str(e.problem):  # newer PyYAML (6.0.4) has its own limit; its scanner meets it before our check
            raise too_deep(source, mark) from None
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise DataFileError(f"{source}: not valid YAML ({at}{e.problem or e.context})") from None
    except yaml.YAMLError as e:
        raise DataFileError(f"{source}: not valid YAML ({e})") from None
    except RecursionError:
        raise too_deep(source) from None
    except ValueError as e:  # an integer of thousands of digits
        raise DataFileError(f"{source}: cannot read a value ({str(e).split(';')[0]})") from None
    return plain(data, source)


def load(path: str | Path, what: str = "file") -> Any:
    """Reads and parses a YAML data file (``what``: "scenario", "campaign", … for messages)."""
    return parse(read_text(path, f"YAML {what}"), str(path))


def plain(data: Any, source: str) -> Any:
    """A fresh copy of ``data`` made of dicts, lists, str, int, float, bool and None."""
    budget = [MAX_VALUES]
    return _copy(data, source, [], budget)


def _where(source: str, path: list) -> str:
    if not path:
        return source
    shown = path if len(path) <= 8 else [*path[:4], "…", *path[-3:]]
    return f"{source}: {'.'.join(map(str, shown))}"


def _copy(v: Any, source: str, path: list, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise DataFileError(f"{source}: more than {MAX_VALUES} values (YAML aliases expanding?)")
    if len(path) > MAX_DEPTH:
        raise too_deep(_where(source, path))
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        if abs(v) >= 10**MAX_INT_DIGITS:
            raise DataFileError(f"{_where(source, path)}: an integer of more than {MAX_INT_DIGITS} digits")
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            what = "a number too large" if math.isinf(v) else "not a number"
            raise DataFileError(f"{_where(source, path)}: {what} ({v}); expected a finite number")
        return v
    if isinstance(v, (_dt.date, _dt.datetime)):
        return v.isoformat()  # the field that receives it says what it expects
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise DataFileError(f"{_where(source, path)}: key {k!r} is not text")
            out[k] = _copy(x, source, [*path, k], budget)
        return out
    if isinstance(v, list):
        return [_copy(x, source, [*path, i], budget) for i, x in enumerate(v)]
    kind = {bytes: "binary data", set: "a set"}.get(type(v), type(v).__name__)
    raise DataFileError(f"{_where(source, path)}: {kind} is not allowed here (expected text, a number or a list)")
