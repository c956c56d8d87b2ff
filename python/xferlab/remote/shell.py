"""One SSH connection per host (asyncssh): commands, files in and out, and every failure said
in one line that names the host.

A host's key is always checked: against ``known_hosts``, or against the fingerprint the
inventory pins. A refused key, a host key that does not match, an unreachable address and
a connection lost during a run are each their own error (:class:`Refused`,
:class:`Unreachable`, :class:`HostLost`), so the backend can say what happened and what to do.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import warnings

from .inventory import HostSpec

with warnings.catch_warnings():
    # cryptography 51 deprecates DSA, whose classes asyncssh (2.24) names at import for
    # DSA keys, which xferlab never uses: five lines of warning on every command otherwise.
    warnings.filterwarnings("ignore", message="DSA is deprecated", module="asyncssh")
    import asyncssh

#: Commands a host runs at once over its connection (OpenSSH's MaxSessions is 10).
CHANNELS = 4
#: Keep-alives: a host that vanishes without closing its connection is noticed after
#: about KEEPALIVE_S × KEEPALIVE_COUNT seconds.
KEEPALIVE_S = 1.0
KEEPALIVE_COUNT = 3


def cmd(*argv: str) -> str:
    """A shell command line of ``argv``, every word quoted: the one way this backend turns
    values into shell text."""
    return " ".join(shlex.quote(str(a)) for a in argv)


class RemoteError(Exception):
    """A host failed a command or cannot be used; the message names the host."""


class Unreachable(RemoteError):
    """The host could not be reached (no route, refused, timed out)."""


class Refused(RemoteError):
    """The host was reached but refused us, or we refused it (its host key)."""


class HostLost(RemoteError):
    """The connection to the host was lost after it was made (the host died, or its sshd)."""


class _Client(asyncssh.SSHClient):
    """Remembers the host key presented and checks it against a pinned fingerprint; notices a
    lost connection."""

    def __init__(self, fingerprint: str | None, lost: asyncio.Future):
        self.fingerprint = fingerprint
        self.presented: str | None = None
        self.lost = lost

    def validate_host_public_key(self, host, addr, port, key) -> bool:
        self.presented = key.get_fingerprint("sha256")
        return self.fingerprint is not None and self.presented == self.fingerprint

    def connection_lost(self, exc) -> None:
        if not self.lost.done():
            self.lost.set_result(str(exc) if exc else "closed by the host")


class Host:
    """A connection to one host of the inventory."""

    def __init__(self, name: str, spec: HostSpec, connect_timeout: float = 10.0):
        self.name, self.spec, self.connect_timeout = name, spec, connect_timeout
        self.conn: asyncssh.SSHClientConnection | None = None
        self.lost: asyncio.Future | None = None
        self.closing = False
        self.channels: asyncio.Semaphore | None = None

    @property
    def where(self) -> str:
        return f"{self.name} ({self.spec.user}@{self.spec.ssh}:{self.spec.port})"

    async def connect(self) -> Host:
        """Logs in, or raises :class:`Unreachable` / :class:`Refused` saying why."""
        s = self.spec
        self.lost = asyncio.get_running_loop().create_future()
        self.channels = asyncio.Semaphore(CHANNELS)
        client = _Client(s.fingerprint, self.lost)
        # Pinned fingerprint: no known_hosts at all (an empty trusted set), the key is
        # checked by the client; otherwise the file and nothing else.
        known = ([], [], []) if s.fingerprint else str(s.known_hosts)
        options = dict(
            username=s.user,
            port=s.port,
            known_hosts=known,
            connect_timeout=self.connect_timeout,
            login_timeout=self.connect_timeout,
            keepalive_interval=KEEPALIVE_S,
            keepalive_count_max=KEEPALIVE_COUNT,
            config=(),  # the inventory says everything: no ~/.ssh/config
        )
        if s.key:  # that key and no other (no agent)
            options.update(client_keys=[str(s.key)], agent_path=None)
        if s.fingerprint:  # no known_hosts to choose host key algorithms from
            options["server_host_key_algs"] = "default"
        try:
            self.conn, _ = await asyncssh.create_connection(lambda: client, s.ssh, **options)
        except asyncssh.HostKeyNotVerifiable:
            raise Refused(self._host_key_message(client.presented)) from None
        except asyncssh.PermissionDenied:
            key = f"key {s.key}" if s.key else "the agent's and ~/.ssh's keys"
            raise Refused(f"{self.where}: login refused for {s.user} with {key} (permission denied)") from None
        except (OSError, asyncio.TimeoutError, asyncssh.Error) as e:
            raise Unreachable(f"{self.where}: unreachable ({_reason(e)})") from None
        return self

    def _host_key_message(self, presented: str | None) -> str:
        s = self.spec
        shown = f"its host key {presented}" if presented else "its host key"
        if s.fingerprint:
            return f"{self.where}: {shown} is not the fingerprint the inventory pins ({s.fingerprint}); refusing to log in"
        return (
            f"{self.where}: {shown} is not one {s.known_hosts} lists for {s.ssh} (a changed host, or a missing entry: "
            f"check it, then add it with ssh-keyscan or pin it with fingerprint:); refusing to log in"
        )

    async def run(self, command: str, *, stdin: bytes | str | None = None, check: bool = True, timeout: float = 60.0) -> str:
        """Runs ``command`` with ``sh -c`` on the host; its stdout (text). A non-zero exit
        with ``check`` is a :class:`RemoteError` with its stderr."""
        res = await self._run(command, stdin, timeout, encoding="utf-8")
        if check and res.exit_status != 0:
            err = (res.stderr or res.stdout or "").strip().splitlines()
            tail = err[-1] if err else f"exit status {res.exit_status}"
            raise RemoteError(f"{self.where}: `{_short(command)}` failed: {tail}")
        return res.stdout or ""

    async def read_bytes(self, command: str, timeout: float = 300.0) -> bytes:
        """The raw stdout of ``command`` (a tar stream, a file)."""
        res = await self._run(command, None, timeout, encoding=None)
        if res.exit_status != 0:
            raise RemoteError(f"{self.where}: `{_short(command)}` failed: {(res.stderr or b'').decode(errors='replace').strip()}")
        return res.stdout or b""

    async def write(self, path: str, data: bytes | str, mode: str = "600") -> None:
        """Writes ``data`` to ``path`` on the host atomically: into a new file of a name no one
        could have prepared (``mktemp``, created exclusively, mode 600) beside it, then renamed
        over it (a symbolic link at ``path`` is replaced, never followed)."""
        if not re.fullmatch(r"[0-7]{3}", mode):
            raise ValueError(f"file mode {mode!r}")
        folder, _, name = path.rpartition("/")
        template = f"{folder or '/'}/.{name[:40]}.XXXXXXXX"
        data = data.encode() if isinstance(data, str) else data
        # The size check: a connection closed mid-write gives cat a short stdin, never a short
        # file. A mktemp that fails still reads stdin: leaving first would close the channel
        # under our write, a lost connection instead of mktemp's reason.
        command = (
            f"umask 077 && {{ t=$({cmd('mktemp', '--', template)}) || {{ cat > /dev/null; exit 1; }}; }} && "
            f'{{ cat > "$t" && [ "$(wc -c < "$t")" -eq {len(data)} ] && chmod {mode} "$t" && mv -f -- "$t" {shlex.quote(path)} '
            '|| { rm -f -- "$t"; false; }; }'
        )
        res = await self._run(command, data, 300.0, encoding=None)
        if res.exit_status != 0:
            raise RemoteError(f"{self.where}: cannot write {path}: {(res.stderr or b'').decode(errors='replace').strip()}")

    async def _run(self, command: str, stdin, timeout: float, encoding):
        if self.conn is None:
            raise HostLost(f"{self.where}: not connected")
        if self.lost is not None and self.lost.done():
            raise HostLost(f"{self.where}: the connection was lost ({self.lost.result()})")
        async with self.channels:
            try:
                return await self.conn.run(command, input=stdin, check=False, timeout=timeout, encoding=encoding)
            except asyncssh.TimeoutError:
                raise RemoteError(f"{self.where}: `{_short(command)}` took more than {timeout:g} s") from None
            except (asyncssh.Error, OSError, EOFError, BrokenPipeError) as e:
                raise HostLost(f"{self.where}: the connection was lost ({_reason(e)})") from None

    async def close(self) -> None:
        self.closing = True
        if self.conn is not None:
            self.conn.close()
            try:
                await asyncio.wait_for(self.conn.wait_closed(), 5)
            except (asyncio.TimeoutError, OSError, asyncssh.Error):
                pass
            self.conn = None


def _reason(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    if isinstance(e, asyncio.TimeoutError) or "timed out" in text.lower():
        return "timed out"
    return text


def _short(command: str, n: int = 80) -> str:
    line = " ".join(command.split())
    return line if len(line) <= n else line[: n - 1] + "…"
