"""Which network interface a host uses to reach an address: what gloo and NCCL need named.

Runs on the hosts (python3 >= 3.8, standard library only), in the supervisor and the probe.
The kernel picks the route (a UDP connect sends nothing); the interface is the one holding the
local address it chose: IPv6 from /proc/net/if_inet6, IPv4 from the interface's primary address
(an ioctl), else any address, secondary ones included (`ip -o addr`).
"""

from __future__ import annotations

import os
import socket
import subprocess

SIOCGIFADDR = 0x8915


def route_ifname(addr: str) -> str | None:
    """The name of the interface this host uses to reach addr (what gloo and NCCL need)."""
    if not addr:
        return None  # '' would "route" to this host itself: never a master address
    try:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))  # UDP connect sends nothing; it only picks a route
            local = s.getsockname()[0]
    except (OSError, ValueError):
        return None
    return ifname_of(local)


def ifname_of(local_addr: str) -> str | None:
    local_addr = local_addr.split("%", 1)[0]  # fe80::1%eth0: the scope is not the address
    if local_addr.startswith("127.") or local_addr == "::1":
        return "lo"
    if ":" in local_addr:
        return _inet6_ifname(local_addr)
    return _primary_ifname(local_addr) or _ip_addr_ifname(local_addr)


def _inet6_ifname(local_addr: str) -> str | None:
    want = socket.inet_pton(socket.AF_INET6, local_addr).hex()
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as f:
            for line in f:  # address index prefix scope flags name
                fields = line.split()
                if len(fields) == 6 and fields[0] == want:
                    return fields[5]
    except OSError:
        pass
    return _ip_addr_ifname(local_addr)


def _primary_ifname(local_addr: str) -> str | None:
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            req = struct.pack("256s", name.encode()[:15])
            try:
                got = fcntl.ioctl(s.fileno(), SIOCGIFADDR, req)
            except OSError:
                continue
            if socket.inet_ntoa(got[20:24]) == local_addr:
                return name
    return None


def _ip_addr_ifname(local_addr: str) -> str | None:
    """Every address, secondary ones too: `2: eth0    inet 10.0.0.5/24 ... secondary eth0`."""
    try:
        out = subprocess.run(
            ["ip", "-o", "addr", "show"], capture_output=True, text=True, timeout=5
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_ip_addr(out, local_addr)


def parse_ip_addr(out: str, local_addr: str) -> str | None:
    for line in out.splitlines():
        fields = line.split()
        if fields[2:3] in (["inet"], ["inet6"]) and fields[3].split("/")[0] == local_addr:
            return fields[1].split("@", 1)[0]
    return None


# -- job.master_port: auto ----------------------------------------------------------------------

EPHEMERAL = (32768, 60999)  # Linux's default ip_local_port_range
LOWEST = 10000  # below: the well-known and registered services' crowd


def free_port(ephemeral: tuple[int, int] | None = None, tries: int = 64) -> int:
    """A port free now for the rendezvous store, from outside the kernel's ephemeral range.

    bind(0) would pick one inside it, where the kernel also hands out the local ports of
    outgoing connections (gloo's, ssh's, any process's): one of those can take the port before
    torchrun's store binds it, which then fails with EADDRINUSE. Outside the range only another
    listener can, and the bind below checks there is none now. bind(0) stays the last resort,
    for a range that leaves no room."""
    low, high = ephemeral or _ephemeral_range()
    room = [(LOWEST, low)] if low - LOWEST >= 1000 else []
    room += [(high + 1, 65536)] if 65535 - high >= 1000 else []
    for _ in range(tries if room else 0):
        start, end = room[_random(len(room))]
        port = start + _random(end - start)
        if bindable(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def bindable(port: int) -> bool:
    return bind_error(port) is None


def bind_error(port: int) -> str | None:
    """Why a listener could not bind the port now, as torchrun's store binds it; None if it
    could."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("", port))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(v) for v in f.read().split())
        return low, high
    except (OSError, ValueError):
        return EPHEMERAL


def _random(n: int) -> int:
    """0 <= r < n, without importing random (milliseconds on every host, for one number)."""
    return int.from_bytes(os.urandom(4), "big") % n
