"""The hosts of one run, together: connected all or none, taken (the run's lease on each),
read, changed (journal first), restored, and the ``cleanup`` that restores them after the
controller was killed.

Connecting comes first and is all-or-nothing: a host that cannot be reached, refuses our key
or shows a host key we do not know stops the run before anything is changed anywhere. Then
the run takes every host (:mod:`xferlab.remote.statedir`), or none: a host another run holds,
live or dead, is refused, naming the holder.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from . import clock, facts, journal, statedir
from .inventory import Inventory, load
from .plan import Change
from .shell import Host, RemoteError, cmd

#: How long a lost host is given to come back when its changes are to be restored.
RECONNECT_S = 5.0


class LeaseLost(RemoteError):
    """A host's journal is no longer this run's (a ``cleanup --force`` undid it): what the run
    measures from then on is not the scenario's."""


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
    """Connections to the hosts ``names`` of an inventory, the leases taken on them, and
    their journals."""

    def __init__(self, inv: Inventory, names: list[str], run_id: str, inventory_path: str = "INVENTORY"):
        self.inv, self.names, self.run_id, self.inventory_path = inv, names, run_id, inventory_path
        timeout = inv.options.connect_timeout
        self.hosts = {n: Host(n, inv.hosts[n], timeout) for n in names}
        self.journals: dict[str, dict] = {}  # the hosts this run holds → their journals
        self.beating: asyncio.Task | None = None
        self.lease_lost: str | None = None

    def workdir(self, name: str) -> str:
        return f"{self.inv.options.workdir.rstrip('/')}/xferlab-ssh-{self.run_id}-{name}"

    @property
    def state_dir(self) -> str:
        return self.inv.options.state_dir

    def controller_copy(self, name: str):
        spec = self.inv.hosts[name]
        return journal.controller_path(spec.ssh, spec.port, name)

    # ------------------------------------------------------------------ connect, take, read

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

    async def take(self) -> None:
        """Takes every host (writes this run's journal there, exclusively), or none: a host
        another run holds is refused, naming the holder, and the hosts taken are let go."""
        try:
            statedir.secure_local(journal.controller_dir())
        except statedir.StateError as e:
            raise RemoteError(str(e)) from None
        problems = [p for p in await together(*(self._take(n) for n in self.names)) if p]
        if problems:
            await self.release()
            raise RemoteError("; ".join(problems))
        self.beating = asyncio.ensure_future(self._beat())

    async def _take(self, name: str) -> str | None:
        h, j = self.hosts[name], journal.new(name, self.run_id)
        text = journal.dumps(j)
        found = statedir.parse(await h.run(statedir.take_script(self.state_dir, len(text.encode())), stdin=text))
        if found.status == "taken":
            self.journals[name] = j
            return None
        return held(h.where, found, self.inventory_path)

    async def _beat(self) -> None:
        """Rewrites every journal this run holds each HEARTBEAT_S (the lease's heartbeat)."""
        while True:
            await asyncio.sleep(statedir.HEARTBEAT_S)
            await self.verify()

    async def verify(self) -> str | None:
        """Rewrites every journal this run holds now (a heartbeat): why one is no longer this
        run's (also kept for :meth:`lost`), or None. A host that cannot be reached is not
        this check's business (its connection's loss is)."""
        for name in list(self.journals):
            try:
                await self.save(name)
            except LeaseLost as e:
                self.lease_lost = self.lease_lost or str(e)
            except RemoteError:
                pass
        return self.lease_lost

    async def save(self, name: str) -> None:
        """Writes host ``name``'s journal (the controller's copy, then the host's) if the host
        is still this run's."""
        j, h = self.journals[name], self.hosts[name]
        text = journal.dumps(j)
        if j["entries"]:
            try:
                statedir.save_local(self.controller_copy(name), text)
            except OSError as e:
                raise RemoteError(f"{h.where}: cannot keep the controller's copy of its journal: {e}") from None
        found = statedir.parse(await h.run(statedir.update_script(self.state_dir, self.run_id, len(text.encode())), stdin=text))
        if found.status == "lost":
            raise LeaseLost(
                f"{h.where}: this run's journal was taken away (a `xferlab cleanup --force`?): its changes there may "
                "have been undone, so the run's figures cannot be trusted"
            )
        if found.status != "updated":
            raise RemoteError(f"{h.where}: cannot write its journal: {found.why}")

    async def read_facts(self, wants: dict[str, tuple[list[str], list[str], list[str]]]) -> dict[str, facts.Facts]:
        """Each host's facts (``wants``: its peers, devices and congestion controls)."""

        async def one(name: str) -> facts.Facts:
            peers, devices, modules = wants.get(name, ([], [], []))
            text = await self.hosts[name].run(facts.script(peers, devices, modules))
            return facts.parse(name, text, peers, devices)

        return dict(zip(self.names, await together(*(one(n) for n in self.names)), strict=True))

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
        self.journals[name]["entries"] = [journal.workdir(w)] + [c.undo for c in changes]
        await self.save(name)
        lines = ["set -e", cmd("mkdir", "-m", "700", "--", w)] + [cmd("mkdir", "-p", "--", f"{w}/{f}") for f in folders]
        for c in changes:
            lines.append(f"{c.command} || {{ echo {cmd('failed: ' + c.what)} >&2; exit 1; }}")
        await h.run("\n".join(lines))

    async def stop(self) -> None:
        """Stops the heartbeat (before restoring: nothing rewrites a journal being undone)."""
        if self.beating is not None:
            self.beating.cancel()
            await asyncio.gather(self.beating, return_exceptions=True)
            self.beating = None

    async def restore(self) -> Restored:
        """Undoes every journal this run holds and lets the hosts go (a lost host is given
        :data:`RECONNECT_S` to come back); never raises."""
        await self.stop()
        out = Restored()

        async def one(name: str) -> None:
            h = self.hosts[name]
            try:
                if h.conn is None or (h.lost is not None and h.lost.done()):
                    h = Host(name, self.inv.hosts[name], RECONNECT_S)
                    await h.connect()
                    self.hosts[name] = h
                n = await undo(h, self.journals[name], self.state_dir, self.controller_copy(name))
                if n:
                    out.undone[name] = n
            except RemoteError as e:
                out.failed[name] = str(e).removeprefix(f"{h.where}: ")

        await asyncio.gather(*(one(n) for n in self.journals))
        self.journals = {n: j for n, j in self.journals.items() if n in out.failed}
        return out

    async def release(self) -> None:
        """Lets go of the hosts taken before anything was changed on them."""
        await self.stop()
        for name, j in list(self.journals.items()):
            if not j["entries"]:
                await self.hosts[name].run(statedir.release_script(self.state_dir, self.run_id), check=False)
                del self.journals[name]

    def lost(self) -> str | None:
        """The first host whose connection was lost (and why), or a lease taken away; None."""
        for h in self.hosts.values():
            if h.lost is not None and h.lost.done() and not h.closing:
                return f"{h.where}: the connection was lost ({h.lost.result()})"
        return self.lease_lost

    async def close(self) -> None:
        await self.stop()
        await asyncio.gather(*(h.close() for h in self.hosts.values()))


def held(where: str, found: statedir.Found, inventory_path: str) -> str:
    """Why a host cannot be taken: its state folder, or who holds it (live or dead)."""
    if found.status == "refused":
        return f"{where}: its state folder cannot be used: {found.why} (options.state_dir)"
    if found.status != "held":
        return f"{where}: its journal could not be taken ({found.status})"
    try:
        j = journal.loads(found.text, f"its journal in {where.split(' ')[0]}'s state folder")
    except journal.JournalError as e:
        return f"{where}: {e}; xferlab will not run it nor replace it: inspect it, then remove it by hand"
    live, how = statedir.alive(j, found.age_s)
    if live:
        return f"{where}: held by {statedir.holder(j)}: {how}; wait for that run to end"
    n = len(j["entries"])
    return (
        f"{where}: the journal of an unfinished run is still there ({statedir.holder(j)}; {how}): its {n} change(s) "
        f"are not undone yet; run `xferlab cleanup --inventory {inventory_path}` first"
    )


async def undo(h: Host, j: dict, state_dir: str, controller_copy) -> int:
    """Runs a journal's undo script on its host; removes the journal (if it is still that
    run's) and the controller's copy once every undo worked. Returns the number of entries
    undone, or raises :class:`RemoteError` listing failures."""
    if j["entries"]:
        text = await h.run(journal.undo_script(j), check=False, timeout=120)
        failed = journal.failures(text)
        if failed:
            raise RemoteError(f"{h.where}: {len(failed)} change(s) could not be undone: " + "; ".join(failed))
    await h.run(statedir.release_script(state_dir, j["run"]))
    statedir.remove_local(controller_copy)
    return len(j["entries"])


async def cleanup(inv: Inventory, inventory_path: str, force: bool = False) -> list[str]:
    """``xferlab cleanup --inventory``: restores every host of the inventory that holds a
    journal (its own, or the controller's copy) of a run that is gone — or, with ``force``,
    of a live one. One line per host that had something."""
    tb = Testbed(inv, list(inv.hosts), "cleanup")
    lines = []

    async def one(name: str) -> None:
        h = tb.hosts[name]
        try:
            await h.connect()
            lines.append(await _clean(h, tb.state_dir, tb.controller_copy(name), inventory_path, force))
        except (RemoteError, journal.JournalError, statedir.StateError) as e:
            lines.append(f"could not restore {name}: {str(e).removeprefix(h.where + ': ')}")
        finally:
            await h.close()

    await asyncio.gather(*(one(n) for n in inv.hosts))
    return sorted(line for line in lines if line)


async def _clean(h: Host, state_dir: str, local, inventory_path: str, force: bool) -> str:
    """Restores one host from its journal, else from the controller's copy; '' if neither."""
    found = statedir.parse(await h.run(statedir.read_script(state_dir)))
    if found.status == "refused":
        raise RemoteError(f"its state folder cannot be used: {found.why} (options.state_dir)")
    if found.status == "held":
        j = journal.loads(found.text, f"its journal in {state_dir}")
        live, how = statedir.alive(j, found.age_s)
        if live and not force:
            raise RemoteError(
                f"held by {statedir.holder(j)}: {how}; a run is live there: let it end, "
                "or pass --force to undo its changes anyway"
            )
    else:
        text = statedir.read_local(local)
        if text is None:
            return ""
        j = journal.loads(text, str(local))
    n = await undo(h, j, state_dir, local)
    return f"restored {h.name}: {n} change(s) undone (run {j['run']}, started {j['started']})"


def cleanup_inventory(path, force: bool = False) -> list[str]:
    """:func:`cleanup` of the inventory at ``path`` (raises InventoryError for a bad one)."""
    inv = load(path)
    lines = asyncio.run(cleanup(inv, str(path), force))
    return lines or ["nothing to restore: no host holds a journal"]
