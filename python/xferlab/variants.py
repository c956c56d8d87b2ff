"""The congestion controls xferlab knows: one table of names, aliases and sources.

Names are Linux's (``tcp_available_congestion_control``). Which variants a backend can run
is the backend's to say: the simulator lists its own (``xferlab version``), the netns
backend uses the kernel's built-ins and the project's BPF programs (``bpf/``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    name: str  # as Linux names it
    title: str  # as papers and the seeds name it
    source: str  # where its laws come from
    kernel: str  # its name on the netns backend: built into the kernel, or the project's BPF program
    aliases: tuple[str, ...] = ()


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("reno", "Reno/NewReno", "RFC 5681, RFC 6582, RFC 3465 byte counting", "reno", ("newreno",)),
        Variant("bic", "BIC", "Xu, Harfoush, Rhee, INFOCOM 2004; Linux tcp_bic.c", "xl_bic"),
        Variant("cubic", "CUBIC", "RFC 9438", "cubic"),
        Variant("highspeed", "HighSpeed TCP", "RFC 3649", "xl_highspeed", ("hstcp", "hs-tcp")),
        Variant("htcp", "H-TCP", "Leith, Shorten, PFLDnet 2004; Linux tcp_htcp.c", "xl_htcp", ("h-tcp",)),
        Variant("scalable", "Scalable TCP", "Kelly, CCR 2003", "xl_scalable", ("stcp",)),
        Variant("bbr", "BBR v1", "Cardwell et al., ACM Queue 2016; Linux tcp_bbr.c", "bbr"),
    )
}
NAMES: tuple[str, ...] = tuple(VARIANTS)
_ALIASES = {alias: v.name for v in VARIANTS.values() for alias in v.aliases}


def canonical(name: object) -> str:
    """The Linux name of a variant given as any of its names (case-insensitive)."""
    text = str(name).strip().lower()
    text = _ALIASES.get(text, text)
    if text not in VARIANTS:
        raise ValueError(f"unknown variant {name!r} (known: {', '.join(NAMES)})")
    return text


def kernel_name(name: str) -> str:
    """The name to give ``TCP_CONGESTION`` on the netns backend."""
    return VARIANTS[canonical(name)].kernel


def needs_bpf(name: str) -> bool:
    """Whether the netns backend runs this variant as one of the project's BPF programs."""
    v = VARIANTS[canonical(name)]
    return v.kernel != v.name
