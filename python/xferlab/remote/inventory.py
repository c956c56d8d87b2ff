"""The inventory: which real hosts run a scenario, how to reach them, and what they do.

::

    defaults: {user: root, key: ~/.ssh/id_ed25519, known_hosts: ~/.ssh/known_hosts}
    hosts:
      s0: {ssh: node-1.lyon.grid5000.fr, data: 10.144.0.1}
      r0: {ssh: node-7.nancy.grid5000.fr, data: 10.144.8.7, fingerprint: "SHA256:…"}
      gw: {ssh: 172.16.0.1, data: 10.144.0.254}
    senders: [s0]                  # pair k: senders[k] → receivers[k]
    receivers: [r0]
    router: {host: gw, bottleneck: eth1, reverse: eth0}   # optional: a router you control
    options: {calibration: 2s, modprobe: true}

Every host is checked against its host key (``known_hosts``, or a pinned ``fingerprint``);
paths are relative to the inventory file. A bad inventory is refused with one line per
problem, naming the field (:class:`InventoryError`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from .. import datafile
from ..units import parse_duration
from . import grammar
from .grammar import DEVICE, NAME

#: OpenSSH's fingerprint forms: ``SHA256:<43 base64 chars>`` (``ssh-keygen -l``).
FINGERPRINT = r"^SHA256:[A-Za-z0-9+/]{43}=?$"
MAX_ERRORS_SHOWN = 20


class InventoryError(Exception):
    """An inventory that cannot be used; one line per problem, each naming the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _path(value: Any, info: ValidationInfo) -> Path | None:
    """A file path of the inventory: ``~`` expanded, relative to the inventory's folder; it
    must exist (a typo is said now, not at the first connection)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError("expected a file path")
    p = Path(value).expanduser()
    base = (info.context or {}).get("base")
    if not p.is_absolute() and base is not None:
        p = Path(base) / p
    if not p.is_file():
        raise ValueError(f"no such file: {p}")
    return p


class Access(_Model):
    """How to log in: the fields a host takes from ``defaults`` unless it gives its own."""

    user: str = Field("root", pattern=grammar.USER)
    port: int = Field(22, ge=1, le=65535)
    #: private key file; none: the SSH agent's keys and ~/.ssh's defaults (asyncssh)
    key: Path | None = None
    known_hosts: Path | None = None

    _files = field_validator("key", "known_hosts", mode="before")(_path)


class HostSpec(Access):
    #: where SSH reaches the host (name or address): the control plane
    ssh: str = Field(pattern=grammar.SSH_HOST)
    #: the host's address on the path the experiment measures: the data plane
    data: str
    #: the host key's fingerprint, pinned (``ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub``)
    fingerprint: str | None = Field(None, pattern=FINGERPRINT)

    @field_validator("data")
    @classmethod
    def _address(cls, v: str) -> str:
        return grammar.address(v, "the data-plane address the flows use")

    @model_validator(mode="after")
    def _checked(self) -> HostSpec:
        if self.fingerprint is None and self.known_hosts is None:
            default = Path("~/.ssh/known_hosts").expanduser()
            if not default.is_file():
                raise ValueError("no way to check its host key: give known_hosts (a file) or fingerprint (SHA256:…)")
            self.known_hosts = default
        return self


class RouterSpec(_Model):
    """A router the user controls, whose egress is the bottleneck: the backend installs the
    scenario's rate and buffer there (HTB over pfifo) and restores it afterwards."""

    host: str
    #: egress device towards the receivers (the forward bottleneck)
    bottleneck: str = Field(pattern=DEVICE)
    #: egress device towards the senders (the reverse bottleneck); none: not shaped
    reverse: str | None = Field(None, pattern=DEVICE)


class Options(_Model):
    #: load a missing congestion control's module (``modprobe tcp_<name>``)
    modprobe: bool = True
    #: clock probes per host (the offset is the one of the fastest round trip)
    clock_probes: int = Field(16, ge=3, le=1000)
    #: length of the calibration transfer per path (0: skip it — and its checks)
    calibration: Annotated[float, "s"] = 2.0
    #: relative tolerance of the path's RTT (plus 1 ms) and rate against the scenario's
    rtt_tolerance: float = Field(0.25, ge=0, le=10)
    rate_tolerance: float = Field(0.25, ge=0, lt=1)
    #: first TCP port of the flows' servers (one port per flow)
    base_port: int = Field(5201, ge=1024, le=65000)
    #: where each host keeps the run's files (a folder per run, removed afterwards)
    workdir: str = "/tmp"
    #: where each host keeps the journal of what the backend changed (for `xferlab cleanup`),
    #: which is also the lease a run holds on the host: a folder of the login's, 0700, that
    #: no one else can write to (docs/ssh.md, Security)
    state_dir: str = "/var/lib/xferlab/ssh"
    connect_timeout: Annotated[float, "s"] = 10.0

    @field_validator("workdir", "state_dir")
    @classmethod
    def _folder(cls, v: Any, info: ValidationInfo) -> str:
        if not isinstance(v, str):
            raise ValueError(f"expected a folder's absolute path, got {v!r}")
        p = grammar.path(v, info.field_name)
        if p == "/":
            raise ValueError(f"{info.field_name} must be a folder below /, not / itself")
        return p

    @field_validator("calibration", "connect_timeout", mode="before")
    @classmethod
    def _seconds(cls, v: Any) -> float:
        try:
            seconds = parse_duration(v, require_unit=True) if isinstance(v, str) else v
        except ValueError:
            seconds = None
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 600:
            raise ValueError(f"expected a time from 0 to 600 s (e.g. 2s), got {v!r}")
        return float(seconds)


class Inventory(_Model):
    name: str | None = None
    defaults: Access = Field(default_factory=Access)
    hosts: dict[Annotated[str, Field(pattern=NAME)], HostSpec]
    senders: list[str] = Field(min_length=1)
    receivers: list[str] = Field(min_length=1)
    router: RouterSpec | None = None
    options: Options = Field(default_factory=Options)

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        """Each host takes the fields of ``defaults`` it does not give itself."""
        if isinstance(data, dict) and isinstance(data.get("hosts"), dict) and isinstance(data.get("defaults"), dict):
            hosts = {}
            for name, h in data["hosts"].items():
                hosts[name] = {**data["defaults"], **h} if isinstance(h, dict) else h
            data = {**data, "hosts": hosts}
        return data

    @model_validator(mode="after")
    def _roles(self) -> Inventory:
        problems = []
        for role in ("senders", "receivers"):
            for i, name in enumerate(getattr(self, role)):
                if name not in self.hosts:
                    problems.append(f"{role}.{i}: {name!r} is not in hosts")
        if len(self.senders) != len(self.receivers):
            n, m = len(self.senders), len(self.receivers)
            problems.append(f"senders: {n} sender(s) for {m} receiver(s); pair k is senders[k] → receivers[k]")
        for k, (a, b) in enumerate(zip(self.senders, self.receivers, strict=False)):
            if a == b:
                problems.append(f"receivers.{k}: {b!r} is also the sender of pair {k}")
        if self.router is not None:
            if self.router.host not in self.hosts:
                problems.append(f"router.host: {self.router.host!r} is not in hosts")
            elif self.router.host in set(self.senders) | set(self.receivers):
                problems.append(f"router.host: {self.router.host!r} is also a sender or a receiver")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def pairs(self) -> int:
        return len(self.senders)

    def used(self, pairs: int) -> list[str]:
        """The hosts a run of ``pairs`` pairs needs, in a stable order (router last)."""
        names = dict.fromkeys(self.senders[:pairs] + self.receivers[:pairs])
        if self.router is not None:
            names[self.router.host] = None
        return list(names)


def load(path: str | Path) -> Inventory:
    """The inventory of a YAML file, or :class:`InventoryError` (one line per problem)."""
    p = Path(path)
    try:
        data = datafile.load(p, "inventory")
    except datafile.DataFileError as e:
        raise InventoryError(str(e)) from None
    if not isinstance(data, dict):
        raise InventoryError(f"{p}: expected a mapping (hosts, senders, receivers, router, options)")
    try:
        return Inventory.model_validate(data, context={"base": p.resolve().parent})
    except ValidationError as e:
        raise InventoryError(_format(str(p), e)) from None


def _format(source: str, err: ValidationError) -> str:
    lines = []
    for e in err.errors()[:MAX_ERRORS_SHOWN]:
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] == "string_pattern_mismatch":
            msg = f"not a valid value: {e.get('input')!r}"
        lines.append(f"{source}: {loc}: {msg}")
    if len(err.errors()) > MAX_ERRORS_SHOWN:
        lines.append(f"{source}: … and {len(err.errors()) - MAX_ERRORS_SHOWN} more problems")
    return "\n".join(lines)
