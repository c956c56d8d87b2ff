"""What the backend changed on a host, written down before it is changed, and undone.

Every change to a host (a sysctl, a route, a qdisc, an offload, a module, a device it
makes, the run's processes and folder) is first recorded as an *undo entry* — the previous value, or how to
remove what is added — in a journal kept in two places: on the host itself (in its state
folder, :mod:`xferlab.remote.statedir`, where the journal is also the run's lease on the host)
and on the controller (:func:`controller_dir`). Only then is it made. Restoring runs the
entries backwards; each undo is idempotent (it sets the saved value, or removes what may
already be gone), so a journal written ahead of a change that never happened restores nothing
wrong. The journal is removed once every entry was undone.

So a run restores its hosts on every exit path it sees (an error, a lost host, SIGINT,
SIGTERM), and after a ``kill -9`` of the controller ``xferlab cleanup --inventory`` reads the
journals and does the same.

A journal read back (from a host, or the controller's copy) is **data, never shell**: it is
checked against :class:`Journal`, whose every field has a strict grammar (sysctls the backend
sets and no other, device names, route words, the run folder's own name pattern), and the undo
commands are built from its values quoted one by one. A journal that does not fit is refused
and nothing of it runs.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import shlex
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import grammar
from .shell import cmd

#: What a restoring script prints for an undo that failed.
FAILED = "xferlab-undo-failed:"
#: The sysctls the backend may set, hence the only ones a journal may restore.
SETTABLE = ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_no_metrics_save")
#: The device a host's per-flow token buckets shape on (made by the run, deleted after).
IFB = "xl-ifb"
#: A journal file is a few kB; one of more is not ours.
MAX_BYTES = 1 << 20
#: Undo entries of one journal at most (a run makes a few per host and flow).
MAX_ENTRIES = 100_000
#: A run's identifier (``uuid4().hex[:8]``), and the name of its folder on a host.
RUN_ID = r"^[0-9a-f]{8}$"
WORKDIR_NAME = r"^xferlab-ssh-[0-9a-f]{8}-[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"


class JournalError(ValueError):
    """A journal that is not one xferlab wrote: refused, never run."""


def controller_dir() -> Path:
    """The controller's copies of the hosts' journals: ``$XFERLAB_SSH_STATE``, else
    ``/var/lib/xferlab/ssh`` for root and ``$XDG_STATE_HOME/xferlab/ssh`` (``~/.local/state``)
    for another user — never a folder others can write (checked by statedir.secure_local)."""
    if os.environ.get("XFERLAB_SSH_STATE"):
        return Path(os.environ["XFERLAB_SSH_STATE"])
    if os.geteuid() == 0:
        return Path("/var/lib/xferlab/ssh")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "xferlab" / "ssh"


def controller_path(spec_ssh: str, port: int, host: str) -> Path:
    """The controller's copy, named after where the host is reached (one per host and login)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{spec_ssh}_{port}_{host}")
    return controller_dir() / f"{safe}.json"


# ----------------------------------------------------------------------------- the schema


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SysctlUndo(_Strict):
    kind: Literal["sysctl"]
    key: Literal[SETTABLE]  # type: ignore[valid-type]
    previous: str = Field(pattern=r"^[0-9A-Za-z_ \t.-]{0,256}$")


class RouteUndo(_Strict):
    """A /32 route to ``dst``: ``previous`` the words of the exact route it replaced (``ip -o
    route show exact``, whose first word is ``dst``), or None when there was none."""

    kind: Literal["route"]
    dst: str
    previous: list[Annotated[str, Field(pattern=grammar.ROUTE_WORD)]] | None = Field(None, max_length=grammar.ROUTE_WORDS_MAX)

    @field_validator("dst")
    @classmethod
    def _dst(cls, v: str) -> str:
        return grammar.address(v, "a route's destination")

    @model_validator(mode="after")
    def _same_route(self) -> RouteUndo:
        if self.previous is not None and self.previous[:1] not in ([self.dst], [grammar.host_route(self.dst)]):
            raise ValueError(f"the previous route must be a route to {self.dst}, not {' '.join(self.previous[:3])!r}…")
        return self


class QdiscUndo(_Strict):
    kind: Literal["qdisc"]
    dev: str = Field(pattern=grammar.DEVICE)


class OffloadsUndo(_Strict):
    kind: Literal["offloads"]
    dev: str = Field(pattern=grammar.DEVICE)
    features: list[Literal["tso", "gso", "gro"]] = Field(min_length=1, max_length=3)


class ModuleUndo(_Strict):
    kind: Literal["module"]
    name: str = Field(pattern=r"^tcp_[a-z0-9_]{1,32}$")


class ClsactUndo(_Strict):
    kind: Literal["clsact"]
    dev: str = Field(pattern=grammar.DEVICE)


class LinkUndo(_Strict):
    kind: Literal["link"]
    name: Literal["xl-ifb"]


class WorkdirUndo(_Strict):
    """The run's folder on the host (``<workdir>/xferlab-ssh-<run>-<host>``); its ``*.pid``
    files name the process groups it started."""

    kind: Literal["workdir"]
    path: str

    @field_validator("path")
    @classmethod
    def _run_folder(cls, v: str) -> str:
        grammar.path(v, "the run's folder")
        if not re.fullmatch(WORKDIR_NAME, v.rsplit("/", 1)[-1]):
            raise ValueError(f"{v!r} is not a run folder's name (xferlab-ssh-RUN-HOST)")
        return v


Entry = Annotated[
    Union[SysctlUndo, RouteUndo, QdiscUndo, OffloadsUndo, ModuleUndo, ClsactUndo, LinkUndo, WorkdirUndo],
    Field(discriminator="kind"),
]


class Journal(_Strict):
    """A run's journal on one host; also its lease there (who holds the host, since when)."""

    host: str = Field(pattern=grammar.NAME)
    run: str = Field(pattern=RUN_ID)
    controller: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,255}$")
    boot: str = Field("", pattern=r"^[0-9a-f-]{0,36}$")
    pid: int = Field(ge=1, le=2**31)
    pid_start: int = Field(0, ge=0)
    started: str = Field(pattern=r"^[0-9T:+.-]{10,40}$")
    entries: list[Entry] = Field(default_factory=list, max_length=MAX_ENTRIES)


def new(host: str, run_id: str) -> dict:
    """A journal with no entries: what a run writes on a host when it takes it."""
    return {
        "host": host,
        "run": run_id,
        "controller": controller_name(),
        "boot": boot_id(),
        "pid": os.getpid(),
        "pid_start": process_start(os.getpid()) or 0,
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "entries": [],
    }


def controller_name() -> str:
    """This machine's node name, in the journal's grammar."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", platform.node())[:255] or "controller"


def boot_id() -> str:
    try:
        text = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
    return text if re.fullmatch(r"[0-9a-f-]{1,36}", text) else ""


def process_start(pid: int) -> int | None:
    """A process's start time (clock ticks since boot, /proc/PID/stat's 22nd field): with
    the PID, what tells it from a later process that got the same PID."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def dumps(journal: dict) -> str:
    return json.dumps(journal, indent=1, sort_keys=True) + "\n"


def loads(text: str, source: str = "journal") -> dict:
    """A journal from its text, checked against :class:`Journal`; :class:`JournalError` saying
    what does not fit (the journal is then never run)."""
    if len(text) > MAX_BYTES:
        raise JournalError(f"{source}: {len(text)} bytes, not a journal xferlab writes")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise JournalError(f"{source}: not JSON") from None
    try:
        return Journal.model_validate(data).model_dump()
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(map(str, first["loc"])) or "(top level)"
        raise JournalError(f"{source}: not a journal xferlab wrote ({where}: {first['msg']})") from None


# ----------------------------------------------------------------------------- undo entries


def sysctl(key: str, previous: str) -> dict:
    return SysctlUndo(kind="sysctl", key=key, previous=previous).model_dump()


def route(dst: str, previous: list[str] | None) -> dict:
    """A /32 route to ``dst``: ``previous`` is the exact route it replaced (the words of ``ip
    route show exact``), or None when there was none."""
    return RouteUndo(kind="route", dst=dst, previous=previous).model_dump()


def qdisc(dev: str) -> dict:
    """A root qdisc installed on ``dev`` over the kernel's default (which deleting it restores)."""
    return QdiscUndo(kind="qdisc", dev=dev).model_dump()


def offloads(dev: str, features: list[str]) -> dict:
    """Offload ``features`` (ethtool's short names: tso, gso, gro) turned off on ``dev``; they were on."""
    return OffloadsUndo(kind="offloads", dev=dev, features=features).model_dump()


def module(name: str) -> dict:
    return ModuleUndo(kind="module", name=name).model_dump()


def clsact(dev: str) -> dict:
    """A ``clsact`` qdisc (with its filters) added to ``dev``, which had none."""
    return ClsactUndo(kind="clsact", dev=dev).model_dump()


def link(name: str) -> dict:
    """A device the run made (the ifb its token buckets shape on), with its qdiscs."""
    return LinkUndo(kind="link", name=name).model_dump()


def workdir(path: str) -> dict:
    """The run's folder on the host; its ``*.pid`` files name the process groups it started."""
    return WorkdirUndo(kind="workdir", path=path).model_dump()


def _if_device(dev: str, command: str) -> str:
    """``command`` when the device still exists (an undo of a device gone is done)."""
    return f"{{ [ ! -e {shlex.quote('/sys/class/net/' + dev)} ] || {command}; }}"


def undo_command(e: dict) -> str:
    """The shell command that undoes one entry (idempotent), every value quoted."""
    kind = e["kind"]
    if kind == "sysctl":
        proc = "/proc/sys/" + e["key"].replace(".", "/")
        return cmd("printf", "%s\\n", e["previous"]) + " > " + shlex.quote(proc)
    if kind == "route":
        if e["previous"]:
            return cmd("ip", "route", "replace", *e["previous"])
        return f"{{ {cmd('ip', 'route', 'del', grammar.host_route(e['dst']))} 2>/dev/null || true; }}"
    if kind == "qdisc":
        return _if_device(e["dev"], f"{cmd('tc', 'qdisc', 'del', 'dev', e['dev'], 'root')} 2>/dev/null || true")
    if kind == "offloads":
        return _if_device(e["dev"], cmd("ethtool", "-K", e["dev"], *(w for f in e["features"] for w in (f, "on"))))
    if kind == "module":
        return f"{{ {cmd('modprobe', '-r', e['name'])} 2>/dev/null || true; }}"
    if kind == "clsact":
        return _if_device(e["dev"], f"{cmd('tc', 'qdisc', 'del', 'dev', e['dev'], 'clsact')} 2>/dev/null || true")
    if kind == "link":
        return _if_device(e["name"], cmd("ip", "link", "del", e["name"]))
    if kind == "workdir":
        return stop_processes(e["path"], "KILL") + f" && {cmd('rm', '-rf', '--', e['path'])}"
    raise JournalError(f"unknown journal entry {kind!r}")


#: The signals a run sends its process groups.
SIGNALS = ("TERM", "KILL", "INT")


def stop_processes(workdir: str, signal: str = "TERM") -> str:
    """Signals every process group the run started in ``workdir`` (one ``NAME.pid`` file each,
    holding the group's leader), checking that the PID is a number and still ours: its command
    line names the folder."""
    if signal not in SIGNALS:
        raise ValueError(f"signal {signal!r}")
    w = shlex.quote(workdir)
    return (
        f'{{ for f in {w}/*.pid; do [ -f "$f" ] || continue; p=$(head -c 20 "$f"); '
        'case "$p" in ""|*[!0-9]*) continue;; esac; '
        f'if grep -qF -- {w} "/proc/$p/cmdline" 2>/dev/null; then kill -s {signal} -- "-$p" 2>/dev/null; fi; done; true; }}'
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
