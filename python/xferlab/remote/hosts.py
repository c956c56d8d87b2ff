"""The hosts of one run, together: connected all or none, read, changed (journal first),
restored, and the ``cleanup`` that restores them after the controller was killed.

Connecting comes first and is all-or-nothing: a host that cannot be reached, refuses our key
or shows a host key we do not know stops the run before anything is changed anywhere.
"""

from __future__ import annotations

import asyncio
import shlex
from dataclasses import dataclass, field

from . import clock, facts, journal
from .inventory import Inventory, load
from .plan import Change
from .shell import Host, RemoteError

#: How long a lost host is given to come back when its changes are to be restored.
RECONNECT_S = 5.0


@dataclass
class Restored:
    """What restoring the hosts did: per host, the number of changes undone, or why not."""

    undone: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def summary(self, inventory_path: str) -> str:
        parts = []
        if self.undone:
            parts.append("restored " + ", ".join(sorted(self.undone)))
        if self.failed:
            parts.append(
                "not restored: "
                + "; ".join(f"{h} ({why})" for h, why in sorted(self.failed.items()))
                + f" — run `xferlab cleanup --inventory {inventory_path}` once reachable"
            )
        return "; ".join(parts) or "nothing to restore"


async def together(*aws):
    """Awaits all of ``aws`` to their end, then raises the first failure: a step on several
    hosts never leaves one of them still changing things when the next step (a restore) begins."""
    results = await asyncio.gather(*aws, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


class Testbed:
    """Connections to the hosts ``names`` of an inventory, and their journals."""

    def __init__(self, inv: Inventory, names: list[str], run_id: str, inventory_path: str = "INVENTORY"):
        self.inv, self.names, self.run_id, self.inventory_path = inv, names, run_id, inventory_path
        timeout = inv.options.connect_timeout
        self.hosts = {n: Host(n, inv.hosts[n], timeout) for n in names}
        self.journals: dict[str, dict] = {}

    def workdir(self, name: str) -> str:
        return f"{self.inv.options.workdir.rstrip('/')}/xferlab-ssh-{self.run_id}-{name}"

    def journal_path(self, name: str) -> str:
        return journal.host_path(self.inv.options.state_dir, name)

    def controller_copy(self, name: str):
        spec = self.inv.hosts[name]
        return journal.controller_path(spec.ssh, spec.port, name)

    # ------------------------------------------------------------------ connect, read

    async def connect(self) -> None:
        """Logs in to every host, or closes them all and raises one error naming each failure."""
        results = await asyncio.gather(*(h.connect() for h in self.hosts.values()), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            await self.close()
            for r in failed:
                if not isinstance(r, RemoteError):
                    raise r
            raise type(failed[0])("; ".join(map(str, failed)))  # Unreachable or Refused, naming each host

    async def read_facts(self, wants: dict[str, tuple[list[str], list[str], list[str]]]) -> dict[str, facts.Facts]:
        """Each host's facts (``wants``: its peers, devices and congestion controls); refuses a
        host that still holds an unfinished run's journal."""

        async def one(name: str) -> facts.Facts:
            peers, devices, modules = wants.get(name, ([], [], []))
            text = await self.hosts[name].run(facts.script(peers, devices, modules, self.journal_path(name)))
            return facts.parse(name, text)

        found = dict(zip(self.names, await together(*(one(n) for n in self.names)), strict=True))
        stale = [n for n, f in found.items() if f.journal or self.controller_copy(n).exists()]
        if stale:
            where = ", ".join(f"{n} ({self.journal_path(n)} or {self.controller_copy(n)})" for n in stale)
            raise RemoteError(
                f"{where}: the journal of an unfinished run is still there (a run killed with kill -9?): its changes "
                f"are not undone yet; run `xferlab cleanup --inventory {self.inventory_path}` first"
            )
        return found

    async def offsets(self, probes: int) -> dict[str, clock.Offset]:
        async def one(h: Host) -> clock.Offset:
            proc = await h.conn.create_process(clock.PROBE_SHELL)
            try:

                async def ask() -> str:
                    proc.stdin.write("\n")
                    return await asyncio.wait_for(proc.stdout.readline(), 10)

                return await clock.measure(ask, probes)
            except ValueError as e:
                raise RemoteError(f"{h.where}: {e}") from None
            finally:
                proc.stdin.write_eof()
                proc.close()

        found = await together(*(one(self.hosts[n]) for n in self.names))
        return dict(zip(self.names, found, strict=True))

    # ------------------------------------------------------------------ change, restore

    async def configure(self, name: str, changes: list[Change], folders: list[str]) -> None:
        """Creates the run's folder (and ``folders`` in it) and makes ``changes`` on host
        ``name``, each written down (undo entry) before any is made."""
        h, w = self.hosts[name], self.workdir(name)
        j = self.journals[name] = journal.new(name, self.run_id)
        j["entries"] = [journal.workdir(w)] + [c.undo for c in changes]
        journal.save_local(self.controller_copy(name), j)
        state = shlex.quote(self.inv.options.state_dir)
        await h.run(f"mkdir -p {state} && chmod 700 {state}")
        await h.write(self.journal_path(name), journal.dumps(j))
        lines = ["set -e", f"mkdir -m 700 {shlex.quote(w)}"] + [f"mkdir -p {shlex.quote(w + '/' + f)}" for f in folders]
        for c in changes:
            lines.append(f"{c.command} || {{ echo {shlex.quote('failed: ' + c.what)} >&2; exit 1; }}")
        await h.run("\n".join(lines))

    async def restore(self) -> Restored:
        """Undoes every journal, on every host that has one (a lost host is given
        :data:`RECONNECT_S` to come back); never raises."""
        out = Restored()

        async def one(name: str) -> None:
            h = self.hosts[name]
            try:
                if h.conn is None or (h.lost is not None and h.lost.done()):
                    h = Host(name, self.inv.hosts[name], RECONNECT_S)
                    await h.connect()
                    self.hosts[name] = h
                out.undone[name] = await undo(h, self.journals[name], self.journal_path(name), self.controller_copy(name))
            except RemoteError as e:
                out.failed[name] = str(e).removeprefix(f"{h.where}: ")

        await asyncio.gather(*(one(n) for n in self.journals))
        self.journals = {n: j for n, j in self.journals.items() if n in out.failed}
        return out

    def lost(self) -> str | None:
        """The first host whose connection was lost (and why), or None."""
        for h in self.hosts.values():
            if h.lost is not None and h.lost.done() and not h.closing:
                return f"{h.where}: the connection was lost ({h.lost.result()})"
        return None

    async def close(self) -> None:
        await asyncio.gather(*(h.close() for h in self.hosts.values()))


async def undo(h: Host, j: dict, host_path: str, controller_copy) -> int:
    """Runs a journal's undo script on its host; removes the journal if every undo worked.
    Returns the number of entries undone, or raises :class:`RemoteError` listing failures."""
    text = await h.run(journal.undo_script(j), check=False, timeout=120)
    failed = journal.failures(text)
    if failed:
        raise RemoteError(f"{h.where}: {len(failed)} change(s) could not be undone: " + "; ".join(failed))
    await h.run(f"rm -f {shlex.quote(host_path)}")
    controller_copy.unlink(missing_ok=True)
    return len(j["entries"])


async def cleanup(inv: Inventory, inventory_path: str) -> list[str]:
    """``xferlab cleanup --inventory``: restores every host of the inventory that holds a
    journal (its own, or the controller's copy). One line per host that had something."""
    tb = Testbed(inv, list(inv.hosts), "cleanup")
    lines = []

    async def one(name: str) -> None:
        h, local = tb.hosts[name], tb.controller_copy(name)
        try:
            await h.connect()
            path = tb.journal_path(name)
            text = await h.run(f"cat {shlex.quote(path)} 2>/dev/null || true")
            j = journal.loads(text) or (journal.loads(local.read_text()) if local.exists() else None)
            if j is None:
                return
            n = await undo(h, j, path, local)
            lines.append(f"restored {name}: {n} change(s) undone (run {j.get('run')}, started {j.get('started')})")
        except RemoteError as e:
            lines.append(f"could not restore {name}: {e}")
        finally:
            await h.close()

    await asyncio.gather(*(one(n) for n in inv.hosts))
    return sorted(lines)


def cleanup_inventory(path) -> list[str]:
    """:func:`cleanup` of the inventory at ``path`` (raises InventoryError for a bad one)."""
    inv = load(path)
    lines = asyncio.run(cleanup(inv, str(path)))
    return lines or ["nothing to restore: no host holds a journal"]
