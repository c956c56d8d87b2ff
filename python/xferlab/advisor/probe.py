"""The host and path check's measurement (``xferlab advise --probe``, docs/advisor.md): the
facts of one inventory pair's hosts, read over SSH, and its path measured with ``xfer``.

It goes as the ssh backend's runs go (docs/ssh.md): it connects to both hosts or neither,
takes both (their journals: no run uses them meanwhile), reads their facts in one command,
makes its folder on each (the journal's one entry), deploys this build's ``xfer`` with a
fresh key, and undoes it all at the end, on every exit path: the process groups it started
are killed by their PIDs, the folders removed, the journals released. It changes no setting.

What it measures, within ``budget_s``: the idle RTT (the smallest of 5 pings from the
sender's data address; without ping, the smallest smoothed RTT of TCP's during the
transfers), then memory-to-memory ``xfer send`` transfers with 1 stream and with N, each
a ladder of volumes grown from the rate the last one reached until a transfer lasts a few
seconds, a phase's share of the budget at most (a transfer still running then is stopped).
"""

from __future__ import annotations

import asyncio
import json
import platform
import time
import uuid
from dataclasses import asdict, dataclass, field

from .. import constants, variants
from ..backends import choreography
from ..backends.ssh import deploy_xfer, ping_rtt, wait_listening
from ..remote import facts, hosts, launch
from ..remote.inventory import Inventory
from ..remote.shell import RemoteError, cmd
from .candidates import VARIANTS

#: The report interval of the transfers' traces.
INTERVAL_S = 0.25
#: The first transfer of a ladder, bytes; a phase's transfer that lasts this share of the
#: phase is long enough; the time kept for undoing everything.
FIRST_VOLUME = 1 << 20
LONG_ENOUGH = 0.3
RESERVE_S = 2.0
#: The variant the transfers use when the sender has it (the advisor's default).
PROBE_VARIANT = "cubic"


class ProbeError(Exception):
    """The probe could not run (a host unreachable or held, a tool missing): the message says why."""


@dataclass
class Transfer:
    """One ``xfer send`` of the probe, from its trace."""

    streams: int
    bytes: int
    seconds: float  # its completion time
    goodput_bps: float  # its steady goodput (:func:`steady_bps`)
    retransmissions: int
    srtt_ms_min: float | None
    srtt_ms_max: float | None
    encrypted: bool
    variant: str

    @property
    def segments(self) -> int:
        return max(1, -(-self.bytes // constants.LINUX_MSS))

    @property
    def loss(self) -> float:
        """Retransmitted segments per segment sent (what TCP lost, as the sender saw it)."""
        return self.retransmissions / self.segments


@dataclass
class Measured:
    """What the probe measured on the path of one inventory pair."""

    pair: int
    sender: str
    receiver: str
    rtt_s: float | None = None
    rtt_source: str = ""  # "ping" (idle) or "tcp" (the smallest srtt under load)
    one: Transfer | None = None  # the longest 1-stream transfer
    many: Transfer | None = None  # the longest N-stream transfer
    streams: int = 4
    seconds: float = 0.0  # how long the probe took
    transfers: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def best_goodput_bps(self) -> float | None:
        rates = [t.goodput_bps for t in (self.one, self.many) if t is not None]
        return max(rates) if rates else None

    def as_dict(self) -> dict:
        return asdict(self) | {"best_goodput_bps": self.best_goodput_bps}


@dataclass
class End:
    """One end of the probed path: its inventory name, data address, the other end's, its facts."""

    name: str
    addr: str
    peer: str
    facts: facts.Facts

    @property
    def route(self) -> dict:
        return (self.facts.routes.get(self.peer) or {}).get("get") or {}

    @property
    def device(self) -> str | None:
        return self.route.get("dev")


@dataclass
class Probed:
    sender: End
    receiver: End
    measured: Measured


def modules() -> list[str]:
    """The kernel names of the variants the advisor may recommend (their modules are looked for)."""
    return sorted({variants.canonical(v) for v in VARIANTS})


def steady_bps(doc: dict) -> float:
    """A trace's goodput without slow start: the bytes of the receiver's intervals (all
    streams together) after the first that has data, over their span; a transfer of fewer
    than three such intervals, its bytes over its completion time."""
    run = doc.get("run") or {}
    by_t: dict[float, float] = {}
    for g in doc.get("goodput") or []:
        by_t[float(g["t"])] = by_t.get(float(g["t"]), 0.0) + float(g["bytes"])
    ts = sorted(by_t)
    first = next((i for i, t in enumerate(ts) if by_t[t] > 0), len(ts))
    if len(ts) - first >= 3 and ts[-1] > ts[first]:
        return sum(by_t[t] for t in ts[first + 1 :]) * 8 / (ts[-1] - ts[first])
    done = float(run.get("completion_time") or 0.0)
    return float(run.get("bytes") or 0) * 8 / done if done > 0 else 0.0


def transfer(doc: dict, streams: int, variant: str) -> Transfer:
    """The figures of one ``xfer send --json`` trace."""
    run = doc.get("run") or {}
    retrans: dict[int, int] = {}
    srtts = []
    for r in doc.get("tcp") or []:
        fid = int(r.get("flow_id") or 0)
        retrans[fid] = max(retrans.get(fid, 0), int(r.get("retransmissions") or 0))
        if r.get("srtt_ms"):
            srtts.append(float(r["srtt_ms"]))
    return Transfer(
        streams=streams,
        bytes=int(run.get("bytes") or 0),
        seconds=float(run.get("completion_time") or 0.0),
        goodput_bps=steady_bps(doc),
        retransmissions=sum(retrans.values()),
        srtt_ms_min=min(srtts) if srtts else None,
        srtt_ms_max=max(srtts) if srtts else None,
        encrypted=bool(run.get("encrypted")),
        variant=variant,
    )


def next_volume(last: Transfer, volume: int, target_s: float) -> int:
    """The next volume of a ladder: what the last transfer's rate moves in ``target_s``, at
    least twice the last."""
    return max(2 * volume, int(last.goodput_bps / 8 * target_s))


def probe(inv: Inventory, inv_path: str, pair: int, streams: int, budget_s: float, say=lambda text: None) -> Probed:
    """Reads the facts of inventory pair ``pair``'s hosts and measures its path (see the module)."""
    if not 0 <= pair < inv.pairs:
        raise ProbeError(f"--pair {pair}: the inventory has {inv.pairs} pair(s) (senders → receivers)")
    return asyncio.run(_Probe(inv, inv_path, pair, streams, budget_s, say).main())


class _Probe:
    def __init__(self, inv: Inventory, inv_path: str, pair: int, streams: int, budget_s: float, say):
        self.inv, self.pair, self.streams, self.budget_s, self.say = inv, pair, streams, budget_s, say
        self.a, self.b = inv.senders[pair], inv.receivers[pair]
        self.bed = hosts.Testbed(inv, [self.a, self.b], uuid.uuid4().hex[:8], inv_path)
        self.port = inv.options.base_port + pair
        self.t0 = time.monotonic()
        self.count = self.done = 0  # transfers started, and ended with a trace

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.t0)

    async def main(self) -> Probed:
        try:
            await self.bed.connect()
        except RemoteError as e:
            raise ProbeError(f"{e}; nothing was changed on any host") from None
        try:
            await self.bed.take()
            return await self.steps()
        except RemoteError as e:
            raise ProbeError(str(e)) from None
        finally:
            restored = await self.bed.restore()
            await self.bed.close()
            if restored.failed:
                self.say(restored.summary(self.bed.inventory_path))

    async def steps(self) -> Probed:
        a, b = self.inv.hosts[self.a].data, self.inv.hosts[self.b].data
        wants = {self.a: ([b], [], modules()), self.b: ([a], [], [])}
        found = await self.bed.read_facts(wants)
        sender, receiver = End(self.a, a, b, found[self.a]), End(self.b, b, a, found[self.b])
        m = Measured(self.pair, self.a, self.b, streams=self.streams)
        self.say(f"probe: {self.a} → {self.b}: facts read")
        m.rtt_s = await ping_rtt(self.bed.hosts[self.a], "ping" in sender.facts.tools, a, b)
        m.rtt_source = "ping" if m.rtt_s is not None else ""
        if m.rtt_s is None:
            m.notes.append(f"no answer to ping from {self.a} (or no ping there): the RTT is TCP's smallest srtt, under load")
        if why := self.cannot_deploy(found):
            m.notes.append(f"no transfer measured: {why}")
        else:
            await self.measure(m, sender)
        if m.rtt_s is None:
            srtts = [t.srtt_ms_min for t in (m.one, m.many) if t is not None and t.srtt_ms_min]
            m.rtt_s, m.rtt_source = (min(srtts) / 1e3, "tcp") if srtts else (None, "")
        m.seconds = time.monotonic() - self.t0
        return Probed(sender, receiver, m)

    def cannot_deploy(self, found: dict[str, facts.Facts]) -> str | None:
        for name, f in found.items():
            if f.arch != platform.machine():
                return f"{name} is {f.arch}, this machine's xfer {platform.machine()}"
            if missing := [t for t in ("setsid", "ss", "date", "kill") if t not in f.tools]:
                return f"{name} lacks {', '.join(missing)}"
        return None

    async def measure(self, m: Measured, sender: End) -> None:
        """Deploys xfer on both hosts, starts its server on the receiver, and runs the two ladders."""
        await hosts.together(self.bed.configure(self.a, [], []), self.bed.configure(self.b, [], ["xfer-root"]))
        key = uuid.uuid4().hex + uuid.uuid4().hex
        await hosts.together(*(deploy_xfer(self.bed.hosts[n], self.bed.workdir(n), key, True) for n in (self.a, self.b)))
        w = self.bed.workdir(self.b)
        listen = choreography.host_port(self.inv.hosts[self.b].data, self.port)
        server = [f"{w}/xfer", "serve", "--listen", listen, "--root", f"{w}/xfer-root", "--key-file", f"{w}/xfer.key"]
        await self.bed.hosts[self.b].run(launch.timed(w, "server", None, server))
        await wait_listening(self.bed.hosts, {self.b: {self.port}})
        cc = PROBE_VARIANT if PROBE_VARIANT in sender.facts.available_cc else None
        m.one = await self.ladder(1, (self.left() - RESERVE_S) / 2, None, cc)
        guess = m.one.goodput_bps * self.streams if m.one else None
        m.many = await self.ladder(self.streams, self.left() - RESERVE_S, guess, cc)
        m.transfers = self.done
        self.say(f"probe: {m.transfers} transfer(s) measured in {time.monotonic() - self.t0:.1f} s")

    async def ladder(self, streams: int, seconds: float, guess_bps: float | None, cc: str | None) -> Transfer | None:
        """Transfers of growing volumes with ``streams`` streams for ``seconds`` at most; the last complete one."""
        deadline = time.monotonic() + seconds
        volume = max(FIRST_VOLUME, int((guess_bps or 0) / 8 * min(0.5, seconds / 8)))
        best = None
        while (left := deadline - time.monotonic()) > 0.5:
            got = await self.send(streams, volume, left, cc)
            if got is None:
                break
            best = got
            left = deadline - time.monotonic()
            if got.seconds >= LONG_ENOUGH * seconds or got.goodput_bps <= 0:
                break
            volume = next_volume(got, volume, min(0.5 * seconds, 0.6 * left))
            if volume / max(got.goodput_bps / 8, 1.0) > left:
                break  # the next would not end in time
        return best

    async def send(self, streams: int, volume: int, timeout: float, cc: str | None) -> Transfer | None:
        """One ``xfer send`` (started detached, its PID kept); None if still running after ``timeout`` (then stopped)."""
        self.count += 1
        h, w, name = self.bed.hosts[self.a], self.bed.workdir(self.a), f"send{self.count}"
        trace = f"{w}/{name}.json"
        args = [f"{w}/xfer", "send", "-P", str(streams), "--no-hash", "--retries", "0", "--no-progress", "-q"]
        args += ["--cc", cc] if cc else []
        args += ["--json", trace, "--interval", f"{INTERVAL_S:g}s", "--key-file", f"{w}/xfer.key"]
        args += [f"mem:{volume}", choreography.host_port(self.inv.hosts[self.b].data, self.port), "--discard"]
        await h.run(launch.timed(w, name, None, args))
        deadline = time.monotonic() + timeout
        while not (done := launch.parse_status(await h.run(launch.status(w, [name])))):
            if time.monotonic() > deadline:
                await h.run(launch.signal_group(w, name, "KILL"))
                return None
            await asyncio.sleep(0.1)
        status = done[name][0]
        if status != 0:
            err = await h.run(cmd("tail", "-c", "300", f"{w}/{name}.err"), check=False)
            raise RemoteError(f"{h.where}: xfer send failed with exit status {status}: {' '.join(err.split())}")
        try:
            doc = json.loads(await h.run(cmd("cat", trace)))
        except ValueError:
            raise RemoteError(f"{h.where}: xfer send left no trace") from None
        self.done += 1
        return transfer(doc, streams, cc or "the host's default")
