"""The rate of the network link a node's ranks talk over, where the node can tell it.

Which interface: the one the collective library is told to use (``NCCL_SOCKET_IFNAME``, then
``GLOO_SOCKET_IFNAME``: the first name of the list), else the interface that holds the address this
host's name resolves to (what gloo and torchrun use by default). Its rate: the speed the kernel reports
for it (``/sys/class/net/IF/speed``, Mbit/s — read through ethtool's ioctl first, since sysfs shows the
network namespace it was mounted in, which inside a container or a namespace node is not the
process's own; virtual interfaces report none, or a nominal 10 Gbit/s), lowered to a rate limit set with ``tc`` on the interface (a ``tbf`` qdisc) when there is one — a shaped
link runs at the shaper's rate, whatever the hardware says. InfiniBand fabrics are not read here:
give ``--link-rate`` for them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

SYS_NET = Path("/sys/class/net")


def link_interface(environ: Mapping[str, str] | None = None, hostname: str | None = None) -> str | None:
    """The interface this node's ranks send over (see the module docstring), or None when unknown."""
    environ = os.environ if environ is None else environ
    for variable in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        names = [n.strip() for n in environ.get(variable, "").split(",") if n.strip() and not n.startswith("^")]
        if names:
            return names[0].lstrip("=")
    try:
        address = socket.gethostbyname(hostname or socket.gethostname())
    except OSError:
        return None
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == address for a in addresses):
            return None if name == "lo" else name
    return None


def sysfs_rate_bits_per_s(interface: str, root: Path = SYS_NET) -> float | None:
    """``/sys/class/net/IF/speed`` in bits/s; None where the kernel reports none (-1, absent, unreadable)."""
    try:
        mbit = int((root / interface / "speed").read_text().strip())
    except (OSError, ValueError):
        return None
    return mbit * 1e6 if mbit > 0 else None


def speed_bits_per_s(interface: str, root: Path = SYS_NET) -> float | None:
    """The interface's speed in bits/s as the kernel reports it (ethtool, else sysfs where sysfs shows
    this process's network namespace: the same interface index), or None."""
    stats = psutil.net_if_stats().get(interface)
    if stats is not None and stats.speed > 0:
        return stats.speed * 1e6
    try:
        same = int((root / interface / "ifindex").read_text()) == socket.if_nametoindex(interface)
    except (OSError, ValueError):
        return None
    return sysfs_rate_bits_per_s(interface, root) if same else None


def tc_rate_bits_per_s(qdisc_json: str) -> float | None:
    """The lowest ``tbf`` rate in ``tc -j qdisc show dev IF``'s output (bits/s), or None."""
    try:
        qdiscs = json.loads(qdisc_json or "[]")
    except ValueError:
        return None
    rates = [q["options"]["rate"] * 8 for q in qdiscs
             if q.get("kind") == "tbf" and isinstance((q.get("options") or {}).get("rate"), int | float)]
    return min(rates) if rates else None


def _tc_rate(interface: str) -> float | None:
    tc = shutil.which("tc", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if tc is None:
        return None
    try:
        out = subprocess.run([tc, "-j", "qdisc", "show", "dev", interface], capture_output=True, text=True,
                             timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return tc_rate_bits_per_s(out.stdout) if out.returncode == 0 else None


def local_link(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """This node's link: ``{"host", "interface", "rate_bits_per_s", "source"}`` (rate None when unreadable)."""
    interface = link_interface(environ)
    link: dict[str, Any] = {"host": socket.gethostname(), "interface": interface, "rate_bits_per_s": None, "source": None}
    if interface is None:
        return link
    speed, shaped = speed_bits_per_s(interface), _tc_rate(interface)
    if shaped is not None and (speed is None or shaped < speed):
        return link | {"rate_bits_per_s": shaped, "source": f"tc tbf on {interface}"}
    if speed is not None:
        return link | {"rate_bits_per_s": speed, "source": f"speed of {interface}"}
    return link


def job_link(per_rank: list[dict[str, Any]], given_bits_per_s: float | None) -> dict[str, Any] | None:
    """The link of a collective run from every rank's :func:`local_link`: the given rate, else the slowest
    node's (a ring runs at its slowest link); None when all ranks share one host and no rate was given
    (their traffic crosses no link)."""
    hosts = sorted({link["host"] for link in per_rank})
    if given_bits_per_s is not None:
        return {"rate_bits_per_s": given_bits_per_s, "source": "--link-rate", "hosts": hosts, "interfaces": []}
    if len(hosts) < 2:
        return None
    known = [link for link in per_rank if link["rate_bits_per_s"]]
    slowest = min(known, key=lambda link: link["rate_bits_per_s"]) if known else None
    return {"rate_bits_per_s": slowest["rate_bits_per_s"] if slowest else None,
            "source": f"{slowest['source']} of {slowest['host']}" if slowest else None, "hosts": hosts,
            "interfaces": sorted({f"{link['host']}:{link['interface']}" for link in per_rank if link["interface"]})}
