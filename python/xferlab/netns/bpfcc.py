"""Congestion controls this kernel lacks, as the project's own BPF struct_ops programs.

The simulator's variants ``bic``, ``highspeed``, ``htcp`` and ``scalable`` are not built into
the kernels the emulation runs on (``reno``, ``cubic`` and ``bbr`` are).  ``bpf/xl_*.bpf.c``
implement them from their papers/RFCs with the simulator's laws and constants (see
``docs/bpf-cc.md``); this module compiles them, registers them for a run and unregisters them
after::

    with host.host_lock(), bpfcc.registered(["htcp", "reno"]):
        sock.setsockopt(IPPROTO_TCP, TCP_CONGESTION, bpfcc.kernel_name("htcp").encode())

Registration is host-global (every namespace sees the names), so callers hold
:func:`host.host_lock`; every name carries :data:`host.BPF_PREFIX` and nothing else is touched.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterable, Iterator
from pathlib import Path

from .. import variants
from ..variants import VARIANTS, needs_bpf
from . import host

#: The project's variant names that need a BPF program, and its kernel name (xferlab.variants).
KERNEL_NAMES = {name: v.kernel for name, v in VARIANTS.items() if needs_bpf(name)}
#: Variants built into the kernel under their own name.
BUILT_IN = tuple(name for name in VARIANTS if not needs_bpf(name))

#: Where the BPF sources live (the repository's ``bpf/``).
SOURCE_DIR = Path(__file__).resolve().parents[3] / "bpf"
#: Where objects and the generated ``vmlinux.h`` go (not committed).
BUILD_DIR = Path(os.environ.get("XFERLAB_BPF_BUILD", SOURCE_DIR.parent / "build" / "bpf"))

AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
CLANG_FLAGS = ["-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86"]


#: Linux's "infinite" ssthresh (``TCP_INFINITE_SSTHRESH``): no congestion control sets more.
SSTHRESH_INFINITE = 0x7FFFFFFF
#: No window on the paths here comes near 2^24 segments.
CWND_ABSURD = 1 << 24


def impossible_window(ssthresh: int, cwnd: int) -> bool:
    """A window no congestion control can have set. This host's kernel sometimes hands a
    socket run by one of these BPF programs a stale stack value as its ssthresh
    (0x822034e5, ``srso_return_thunk + 5``; VALIDATION.md §6, "Void kernel runs"); the run is
    then void."""
    return ssthresh > SSTHRESH_INFINITE or cwnd > CWND_ABSURD


def kernel_name(variant: str) -> str:
    """The name to give ``setsockopt(TCP_CONGESTION)`` or ``iperf3 -C`` for a project variant."""
    return variants.kernel_name(variant)


def available() -> list[str]:
    """Congestion controls the kernel offers now (built-in and registered)."""
    try:
        return AVAILABLE.read_text().split()
    except OSError:
        return []


def object_path(name: str) -> Path:
    return BUILD_DIR / f"{name}.bpf.o"


def build(force: bool = False) -> Path:
    """Compiles ``bpf/xl_*.bpf.c`` into :data:`BUILD_DIR` when a source is newer than its object.

    ``vmlinux.h`` is generated from the running kernel's BTF (one per kernel release).
    Returns the build directory.
    """
    host.require_tools("clang", "bpftool")
    if not (SOURCE_DIR / "xl_cc.h").exists():
        raise host.HostError(f"the BPF sources are not in {SOURCE_DIR} (run from a checkout of the repository)")
    if not VMLINUX_BTF.exists():
        raise host.HostError(f"{VMLINUX_BTF} is missing: the kernel has no BTF, BPF congestion controls cannot load")
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    vmlinux_dir = BUILD_DIR / platform.release()
    vmlinux_h = vmlinux_dir / "vmlinux.h"
    if force or not vmlinux_h.exists():
        vmlinux_dir.mkdir(exist_ok=True)
        text = host.sh(["bpftool", "btf", "dump", "file", str(VMLINUX_BTF), "format", "c"])
        tmp = vmlinux_h.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(vmlinux_h)
    headers = [vmlinux_h, *SOURCE_DIR.glob("*.h")]
    for name in KERNEL_NAMES.values():
        src = SOURCE_DIR / f"{name}.bpf.c"
        obj = object_path(name)
        newest = max(p.stat().st_mtime for p in [src, *headers])
        if force or not obj.exists() or obj.stat().st_mtime < newest:
            tmp = obj.with_suffix(".tmp")
            host.sh(["clang", *CLANG_FLAGS, f"-I{vmlinux_dir}", f"-I{SOURCE_DIR}", "-c", str(src), "-o", str(tmp)], timeout=120)
            tmp.replace(obj)
    return BUILD_DIR


def _require_own(name: str) -> None:
    if not name.startswith(host.BPF_PREFIX):
        raise ValueError(f"refusing to touch congestion control {name!r}: not registered by xferlab")


def unregister(names: Iterable[str]) -> None:
    """Unregisters BPF congestion controls (``xl_*`` names only); a name not registered is fine."""
    names = list(names)
    for name in names:
        _require_own(name)
    for name in names:
        if name in available():
            host.sh(["bpftool", "struct_ops", "unregister", "name", name], check=False)
    left = [n for n in names if n in available()]
    if left:
        raise host.HostError(f"could not unregister congestion control(s) {', '.join(left)}")


def register(wanted: Iterable[str]) -> list[str]:
    """Registers the BPF programs the variants need; returns their kernel names.

    Built-in variants need nothing.  A name already registered (a leftover of a crashed run)
    is unregistered first, so the program registered is the one just built.  If one fails,
    those registered by this call are unregistered again.
    """
    names = list(dict.fromkeys(kernel_name(v) for v in wanted if v not in BUILT_IN))
    if not names:
        return []
    host.require_root()
    build()
    done: list[str] = []
    try:
        for name in names:
            unregister([name])
            try:
                host.sh(["bpftool", "struct_ops", "register", str(object_path(name))], timeout=60)
            except host.HostError as e:
                hint = "does the kernel allow BPF struct_ops congestion controls?"
                raise host.HostError(f"registering {name} failed ({hint}): {str(e)[-2000:]}") from None
            done.append(name)
            if name not in available():
                raise host.HostError(f"{name} registered but not listed in {AVAILABLE}")
    except BaseException:
        with contextlib.suppress(host.HostError):
            unregister(done)
        raise
    return names


@contextlib.contextmanager
def registered(wanted: Iterable[str]) -> Iterator[list[str]]:
    """Registers what the ``wanted`` variants need for the body and always unregisters it on exit.

    Yields the kernel names registered (empty when all variants are built in).  Hold
    :func:`host.host_lock` around it: registration is host-global.
    """
    names = register(wanted)
    try:
        yield names
    finally:
        unregister(names)


def main() -> None:
    """``python -m xferlab.netns.bpfcc``: compiles the programs and prints the objects."""
    try:
        build(force=True)
    except host.HostError as e:
        raise SystemExit(str(e)) from None
    for name in KERNEL_NAMES.values():
        print(object_path(name))


if __name__ == "__main__":
    main()
