"""Where the journals live, and why they can be trusted: a host's state folder, the lease a
run holds on a host, and the controller's copies.

**The folder rule** (the same on a host, in shell, and on the controller, in Python): the
state folder is a real folder (not a symbolic link) owned by the user the backend logs in as,
with no access for group or others (0700; a folder of ours that is only readable by others is
made 0700); every folder above it is owned by root or that user and not writable by others,
unless it is sticky (``/tmp``, ``/var/tmp``: others cannot rename or remove what is ours
there). A folder that breaks the rule is refused with the reason, never used: whoever else
could write there could have written the journal that ``cleanup`` runs as root, or a link
that turns our write into theirs. Paths are resolved once (``readlink -f``) and the resolved
folder is the one checked and used.

**The lease**: a run takes each host before its pre-flight by creating the host's journal
file, exclusively (a new file hard-linked into place: ``ln`` fails if the name exists), named
after the host itself (its machine id and network namespace, :data:`_HOST_ID`), so two
inventories that name one host differently still meet there. While the run lives it rewrites
the journal every :data:`HEARTBEAT_S` (its modification time is the heartbeat); a second run,
or a ``cleanup``, that finds the file reads who holds it and how long ago it last beat.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from . import journal
from .shell import cmd

#: How often a live run rewrites its journals (their modification time: the heartbeat).
HEARTBEAT_S = 5.0
#: A lease that has not beaten for this long belongs to a controller that is gone (when
#: liveness cannot be checked more directly: another machine's process).
STALE_S = 30.0
#: What the host scripts print before a refusal.
REFUSED = "xferlab-state-refused="

#: A shell function that applies the folder rule to "$1" (creating it, 0700, when missing) and
#: sets $SD to the resolved folder, or prints a refusal and returns 1.
_SECURE = r"""xl_secure() {
  d=$1; me=$(id -u)
  if [ ! -e "$d" ] && [ ! -L "$d" ]; then
    (umask 077 && mkdir -p -- "$d") 2>/dev/null || { echo "@R@cannot create $d"; return 1; }; fi
  [ -L "$d" ] && { echo "@R@$d is a symbolic link"; return 1; }
  [ -d "$d" ] || { echo "@R@$d is not a folder"; return 1; }
  d=$(readlink -f -- "$d") && [ -n "$d" ] || { echo "@R@cannot resolve $1"; return 1; }
  p=""; rest=${d#/}
  while [ -n "$rest" ]; do
    c=${rest%%/*}; p="$p/$c"
    if [ "$c" = "$rest" ]; then rest=""; else rest=${rest#*/}; fi
    s=$(stat -c '%u %a' -- "$p") || { echo "@R@cannot read $p"; return 1; }
    u=${s%% *}; m=${s#* }
    if [ "$u" != 0 ] && [ "$u" != "$me" ]; then echo "@R@$p is owned by uid $u, not root or uid $me"; return 1; fi
    if [ -n "$rest" ] && [ $((0$m & 022)) -ne 0 ] && [ $((0$m & 01000)) -eq 0 ]; then
      echo "@R@$p is writable by others (and not sticky)"; return 1; fi
  done
  [ "$u" = "$me" ] || { echo "@R@$d is owned by uid $u, not uid $me (the login)"; return 1; }
  [ $((0$m & 022)) -eq 0 ] || {
    echo "@R@$d is writable by group or others (mode $m): anyone could have written a journal there"; return 1; }
  [ $((0$m & 077)) -eq 0 ] || chmod 700 -- "$d" || { echo "@R@cannot make $d 0700"; return 1; }
  SD=$d
}""".replace("@R@", REFUSED)

#: The host's own name for its journal: its machine id and network namespace (each namespace
#: of a test bed is a host; a real host has one, whose inode is the same after every boot).
_HOST_ID = (
    "n=$(readlink /proc/self/ns/net 2>/dev/null); n=${n#*[}; n=${n%]}; "
    'm=$(head -c 12 /etc/machine-id 2>/dev/null); HID="host-${m}-${n}"; '
    'case "$HID" in *[!A-Za-z0-9-]*) HID=host;; esac; F="$SD/$HID.json"'
)

#: Prints what holds the journal "$F": its age by the host's clock, then its text.
_SHOW = (
    (
        'if [ -L "$F" ] || { [ -e "$F" ] && [ ! -f "$F" ]; }; then echo "@R@$F is not a regular file"; exit 0; fi; '
        'if [ -f "$F" ]; then echo "age=$(( $(date +%s) - $(stat -c %Y -- "$F") ))"; echo "owner=$(stat -c %u -- "$F")"; '
        'echo "journal:"; head -c @N@ -- "$F"; else echo absent; fi'
    )
    .replace("@R@", REFUSED)
    .replace("@N@", str(journal.MAX_BYTES))
)


def _preamble(state_dir: str, reads_stdin: bool = False) -> str:
    """Applies the folder rule and names the journal. A script given the journal on stdin
    reads it whole even when it refuses: one that left first closed the channel under the
    controller's write ("Channel not open for sending"), a lost connection instead of the
    refusal's reason."""
    drain = "cat > /dev/null; " if reads_stdin else ""
    return f"{_SECURE}\nxl_secure {cmd(state_dir)} || {{ {drain}exit 0; }}\n{_HOST_ID}\n"


def _whole(size: int) -> str:
    """A test that "$t" holds the ``size`` bytes sent on stdin: a controller that goes (its run
    cancelled, its connection closed) mid-write leaves ``cat`` a short stdin, never a short
    journal in place."""
    if not (isinstance(size, int) and size >= 0):
        raise ValueError(f"journal size {size!r}")
    return f'[ "$(wc -c < "$t")" -eq {size} ]'


def take_script(state_dir: str, size: int) -> str:
    """Takes the host (the journal on stdin, of ``size`` bytes, becomes its journal if it has
    none): prints ``taken=PATH``, or what holds it (:func:`parse`)."""
    take = (
        'umask 077; t=$(mktemp -- "$SD/.take.XXXXXXXX") || { cat > /dev/null; echo "@R@cannot write in $SD"; exit 0; }\n'
        'cat > "$t" || { rm -f -- "$t"; echo "@R@cannot write in $SD"; exit 0; }\n'
        f'{_whole(size)} || {{ rm -f -- "$t"; echo "@R@the journal arrived cut short"; exit 0; }}\n'
        'if ln -- "$t" "$F" 2>/dev/null; then rm -f -- "$t"; echo "taken=$F"; exit 0; fi\n'
        'rm -f -- "$t"\n'
    ).replace("@R@", REFUSED)
    return _preamble(state_dir, reads_stdin=True) + take + _SHOW + "\n"


def read_script(state_dir: str) -> str:
    """Prints the host's journal and its age, or ``absent`` (:func:`parse`)."""
    return _preamble(state_dir) + _SHOW + "\n"


def _ours(run_id: str) -> str:
    """A test that "$F" is the journal of run ``run_id`` (as :func:`journal.dumps` writes it)."""
    if not re.fullmatch(journal.RUN_ID, run_id):
        raise ValueError(f"run id {run_id!r}")
    return f'{{ [ -f "$F" ] && [ ! -L "$F" ] && grep -qF -- {cmd(json.dumps({"run": run_id})[1:-1])} "$F"; }}'


def update_script(state_dir: str, run_id: str, size: int) -> str:
    """Replaces the host's journal with the one on stdin (``size`` bytes) if it is still run
    ``run_id``'s (a heartbeat, or new entries): prints ``updated``, or ``lost`` when another
    has it now."""
    write = (
        'umask 077; t=$(mktemp -- "$SD/.beat.XXXXXXXX") || { cat > /dev/null; echo "@R@cannot write in $SD"; exit 0; }\n'
        'cat > "$t" || { rm -f -- "$t"; echo "@R@cannot write in $SD"; exit 0; }\n'
        f'{_whole(size)} || {{ rm -f -- "$t"; echo "@R@the journal arrived cut short"; exit 0; }}\n'
        'mv -f -- "$t" "$F" && echo updated || { rm -f -- "$t"; echo "@R@cannot write in $SD"; }\n'
    ).replace("@R@", REFUSED)
    return _preamble(state_dir, reads_stdin=True) + f"if ! {_ours(run_id)}; then cat > /dev/null; echo lost; exit 0; fi\n" + write


def release_script(state_dir: str, run_id: str) -> str:
    """Removes the host's journal if it is run ``run_id``'s; prints ``released`` or ``lost``."""
    return _preamble(state_dir) + f'if {_ours(run_id)}; then rm -f -- "$F" && echo released; else echo lost; fi\n'


@dataclass
class Found:
    """What a state-folder script said of a host's journal."""

    status: str  # taken, absent, held, updated, released, lost, refused
    path: str = ""
    age_s: float | None = None
    text: str = ""
    why: str = ""


def parse(output: str) -> Found:
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(REFUSED):
            return Found("refused", why=line[len(REFUSED) :])
        if line.startswith("taken="):
            return Found("taken", path=line[6:])
        if line in ("absent", "updated", "released", "lost"):
            return Found(line)
        if line.startswith("age="):
            age = line[4:].lstrip("-")
            text = "\n".join(lines[i + 3 :]) if i + 2 < len(lines) and lines[i + 2] == "journal:" else ""
            return Found("held", age_s=float(line[4:]) if age.isdigit() else None, text=text)
    return Found("refused", why="the host's state folder script said nothing it should (no POSIX shell, or GNU stat?)")


# ----------------------------------------------------------------------------- the controller


class StateError(OSError):
    """The controller's state folder breaks the folder rule, or cannot be written."""


def secure_local(folder: Path) -> Path:
    """The controller's state folder, created 0700 if missing and checked against the folder
    rule; :class:`StateError` saying why it cannot be used."""
    me = os.geteuid()
    try:
        if not os.path.lexists(folder):
            old = os.umask(0o077)
            try:
                folder.mkdir(parents=True, exist_ok=True)
            finally:
                os.umask(old)
        if folder.is_symlink():
            raise StateError(f"{folder} is a symbolic link")
        real = Path(os.path.realpath(folder))
        chain = [*reversed(real.parents), real]
        for p in chain:
            st = os.lstat(p)
            if st.st_uid not in (0, me):
                raise StateError(f"{p} is owned by uid {st.st_uid}, not root or uid {me}")
            shared = st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX
            if p != real and shared:
                raise StateError(f"{p} is writable by others (and not sticky)")
        st = os.lstat(real)
        if not stat.S_ISDIR(st.st_mode):
            raise StateError(f"{real} is not a folder")
        if st.st_uid != me:
            raise StateError(f"{real} is owned by uid {st.st_uid}, not uid {me}")
        if st.st_mode & 0o022:
            raise StateError(f"{real} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")
        if st.st_mode & 0o077:
            os.chmod(real, 0o700)
        return real
    except StateError as e:
        raise StateError(f"the controller's state folder cannot be used: {e} (set XFERLAB_SSH_STATE to another)") from None
    except OSError as e:
        raise StateError(
            f"the controller's state folder {folder} cannot be used: {e.strerror or e} (set XFERLAB_SSH_STATE to another)"
        ) from None


def save_local(path: Path, data: str) -> None:
    """Writes a journal copy atomically into a checked folder: a new file (O_EXCL, O_NOFOLLOW,
    0600), then renamed over ``path``."""
    folder = secure_local(path.parent)
    tmp = folder / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(data)
        os.replace(tmp, folder / path.name)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_local(path: Path) -> str | None:
    """A journal copy's text (None when there is none), opened without following a link and
    refused unless it is a regular file of this user in a checked folder."""
    folder = secure_local(path.parent)
    try:
        fd = os.open(folder / path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StateError(f"{path}: cannot be read ({e.strerror or e}; a symbolic link?)") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise StateError(f"{path}: not a regular file of uid {os.geteuid()}")
        return f.read(journal.MAX_BYTES + 1).decode("utf-8", errors="replace")


def remove_local(path: Path) -> None:
    try:
        secure_local(path.parent)
    except StateError:
        return
    path.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- who holds a host


def alive(j: dict, age_s: float | None) -> tuple[bool, str]:
    """Whether the run that wrote journal ``j`` still lives, and how that is known: its own
    process when it ran on this controller (PID and start time, so a reused PID is told
    apart), else its heartbeat (the journal rewritten less than :data:`STALE_S` ago)."""
    if j["controller"] == journal.controller_name() and j["boot"] and j["boot"] == journal.boot_id():
        started = journal.process_start(j["pid"])
        if started is not None and (not j["pid_start"] or started == j["pid_start"]):
            return True, f"its process {j['pid']} runs on this controller"
        return False, f"its process {j['pid']} on this controller is gone"
    if age_s is not None and age_s < STALE_S:
        return True, f"its last heartbeat was {age_s:.0f} s ago"
    beat = f"{age_s:.0f} s ago" if age_s is not None else "at an unknown time"
    return False, f"its last heartbeat was {beat} (a live run beats every {HEARTBEAT_S:.0f} s)"


def holder(j: dict) -> str:
    """Who holds a host, for a message: run, controller, PID, since when."""
    named = f", named {j['host']} there" if j.get("host") else ""
    return f"run {j['run']} of controller {j['controller']} (pid {j['pid']}), started {j['started']}{named}"
