"""What the backend changed on a host, written down before it is changed, and undone.

Every change to a host (a sysctl, a route, a qdisc, an offload, a module, a device it
makes, the run's processes and folder) is first recorded as an *undo entry* — the previous value, or how to
remove what is added — in a journal kept in two places: on the host itself
(``<state_dir>/<host>.json``) and on the controller (:data:`CONTROLLER_DIR`). Only then is it
made. Restoring runs the entries backwards; each undo is idempotent (it sets the saved value,
or removes what may already be gone), so a journal written ahead of a change that never
happened restores nothing wrong. The journal is removed once every entry was undone.

So a run restores its hosts on every exit path it sees (an error, a lost host, SIGINT,
SIGTERM), and after a ``kill -9`` of the controller ``xferlab cleanup --inventory`` reads the
journals and does the same. A host that still has a journal is refused by the next run's
pre-flight: its "previous" values would be the last run's.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import shlex
from pathlib import Path

#: The controller's copies of the hosts' journals.
CONTROLLER_DIR = Path(os.environ.get("XFERLAB_SSH_STATE", "/var/tmp/xferlab/ssh"))
#: What a restoring script prints for an undo that failed.
FAILED = "xferlab-undo-failed:"


def host_path(state_dir: str, host: str) -> str:
    return f"{state_dir.rstrip('/')}/{host}.json"


def controller_path(spec_ssh: str, port: int, host: str) -> Path:
    """The controller's copy, named after where the host is reached (one per host and login)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{spec_ssh}_{port}_{host}")
    return CONTROLLER_DIR / f"{safe}.json"


def new(host: str, run_id: str) -> dict:
    return {
        "host": host,
        "run": run_id,
        "controller": platform.node(),
        "pid": os.getpid(),
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "entries": [],
    }


def dumps(journal: dict) -> str:
    return json.dumps(journal, indent=1, sort_keys=True) + "\n"


def loads(text: str) -> dict | None:
    """A journal from its text; None for an empty or unreadable one."""
    try:
        j = json.loads(text) if text.strip() else None
    except ValueError:
        return None
    return j if isinstance(j, dict) and isinstance(j.get("entries"), list) else None


def save_local(path: Path, journal: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(dumps(journal))
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- undo entries


def sysctl(key: str, previous: str) -> dict:
    return {"kind": "sysctl", "key": key, "previous": previous}


def route(dst: str, previous: str | None) -> dict:
    """A /32 route to ``dst``: ``previous`` is the exact route it replaced (``ip route show
    exact``), or None when there was none."""
    return {"kind": "route", "dst": dst, "previous": previous}


def qdisc(dev: str) -> dict:
    """A root qdisc installed on ``dev`` over the kernel's default (which deleting it restores)."""
    return {"kind": "qdisc", "dev": dev}


def offloads(dev: str, features: list[str]) -> dict:
    """Offload ``features`` (ethtool's short names: tso, gso, gro) turned off on ``dev``; they were on."""
    return {"kind": "offloads", "dev": dev, "features": features}


def module(name: str) -> dict:
    return {"kind": "module", "name": name}


def clsact(dev: str) -> dict:
    """A ``clsact`` qdisc (with its filters) added to ``dev``, which had none."""
    return {"kind": "clsact", "dev": dev}


def link(name: str) -> dict:
    """A device the run made (the ifb its token buckets shape on), with its qdiscs."""
    return {"kind": "link", "name": name}


def workdir(path: str) -> dict:
    """The run's folder on the host; its ``*.pid`` files name the process groups it started."""
    return {"kind": "workdir", "path": path}


def undo_command(e: dict) -> str:
    """The shell command that undoes one entry (idempotent)."""
    kind = e["kind"]
    if kind == "sysctl":
        proc = "/proc/sys/" + e["key"].replace(".", "/")
        return f"printf '%s\\n' {shlex.quote(e['previous'])} > {proc}"
    if kind == "route":
        if e["previous"]:
            return f"ip route replace {e['previous']}"
        return f"{{ ip route del {shlex.quote(e['dst'])}/32 2>/dev/null || true; }}"
    if kind == "qdisc":
        dev = shlex.quote(e["dev"])
        return f"{{ [ ! -e /sys/class/net/{dev} ] || tc qdisc del dev {dev} root 2>/dev/null || true; }}"
    if kind == "offloads":
        dev = shlex.quote(e["dev"])
        on = " ".join(f"{f} on" for f in e["features"])
        return f"{{ [ ! -e /sys/class/net/{dev} ] || ethtool -K {dev} {on}; }}"
    if kind == "module":
        return f"{{ modprobe -r {shlex.quote(e['name'])} 2>/dev/null || true; }}"
    if kind == "clsact":
        dev = shlex.quote(e["dev"])
        return f"{{ [ ! -e /sys/class/net/{dev} ] || tc qdisc del dev {dev} clsact 2>/dev/null || true; }}"
    if kind == "link":
        name = shlex.quote(e["name"])
        return f"{{ [ ! -e /sys/class/net/{name} ] || ip link del {name}; }}"
    if kind == "workdir":
        return stop_processes(e["path"], "KILL") + f" && rm -rf {shlex.quote(e['path'])}"
    raise ValueError(f"unknown journal entry {kind!r}")


def stop_processes(workdir: str, signal: str = "TERM") -> str:
    """Signals every process group the run started in ``workdir`` (one ``NAME.pid`` file each,
    holding the group's leader), checking that the PID is still ours: its command line
    names the folder."""
    w = shlex.quote(workdir)
    return (
        f'{{ for f in {w}/*.pid; do [ -f "$f" ] || continue; p=$(cat "$f"); '
        f"if grep -qF {w} /proc/$p/cmdline 2>/dev/null; then kill -s {signal} -- -$p 2>/dev/null; fi; done; true; }}"
    )


def undo_script(journal: dict) -> str:
    """A script that undoes every entry, newest first, and names each undo that failed."""
    lines = []
    for e in reversed(journal["entries"]):
        what = json.dumps(e, sort_keys=True)
        lines.append(f"{undo_command(e)} || echo {shlex.quote(FAILED + ' ' + what)}")
    return "\n".join(lines) + "\n"


def failures(output: str) -> list[str]:
    return [line[len(FAILED) :].strip() for line in output.splitlines() if line.startswith(FAILED)]
