"""The strict grammars of every field that reaches a remote host: names, devices, paths,
addresses, route words.

The ssh backend logs in as root. Every value it sends to a host comes from an inventory, a
scenario, a journal read back from a host, or a host's own output, and all of them are
checked here against a grammar of characters that mean nothing to a shell, before they are
quoted into a command anyway (:func:`xferlab.remote.shell.cmd`). Two locks on one door: a
value that slips past one is stopped by the other.
"""

from __future__ import annotations

import ipaddress
import re

#: Host names in an inventory: what a report, a log folder and a journal are named after.
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
#: A network device name (Linux: at most 15 bytes, IFNAMSIZ − 1).
DEVICE = r"^[A-Za-z0-9_.:@-]{1,15}$"
#: An IPv6 zone (scope id): an interface name or index; nothing a shell reads.
SCOPE = r"^[A-Za-z0-9_.-]{1,15}$"
#: An absolute path of plain components (no spaces, quotes, ``$``, globs or ``..``).
PATH_CHARS = r"^/[A-Za-z0-9_.:/-]{0,255}$"
#: One word of an ``ip route`` line, as ``ip -o route show`` prints it.
ROUTE_WORD = r"^[A-Za-z0-9_.:/%@+-]{1,64}$"
#: Words of one route line at most.
ROUTE_WORDS_MAX = 64
#: A login on the host (POSIX portable user names).
USER = r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$"
#: Where SSH reaches a host: a DNS name, an IPv4 address or an IPv6 one (with its zone).
SSH_HOST = r"^[A-Za-z0-9_.:%-]{1,253}$"


def matches(pattern: str, value: object) -> bool:
    return isinstance(value, str) and re.fullmatch(pattern, value) is not None


def path(value: str, what: str = "path") -> str:
    """An absolute path of plain components, or ValueError saying what is wrong."""
    if not matches(PATH_CHARS, value):
        raise ValueError(f"{what} must be an absolute path of letters, digits and _ . : / - (got {value!r})")
    parts = value.split("/")[1:]
    if any(p in (".", "..") for p in parts) or "//" in value:
        raise ValueError(f"{what} must not have empty, '.' or '..' components (got {value!r})")
    return value.rstrip("/") or "/"


def address(value: object, what: str = "address") -> str:
    """An IP address in its canonical text (IPv6 zone checked against :data:`SCOPE`)."""
    if not isinstance(value, str):
        raise ValueError(f"not an IP address: {value!r} ({what})")
    try:
        a = ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"not an IP address: {value!r} ({what})") from None
    scope = getattr(a, "scope_id", None)
    if scope is not None and not matches(SCOPE, scope):
        raise ValueError(f"not a valid IPv6 zone: {scope!r} in {value!r} (an interface name: letters, digits, _ . -)")
    return str(a)


def host_route(addr: str) -> str:
    """The prefix of a route to one host: ``A/32``, or ``A/128`` for IPv6."""
    return f"{addr}/128" if ":" in addr else f"{addr}/32"
