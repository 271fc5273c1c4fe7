"""Which network interface a host uses to reach an address: what gloo and NCCL need named.

Runs on the hosts (python3 >= 3.8, standard library only), in the supervisor and the probe.
"""

from __future__ import annotations

import socket

SIOCGIFADDR = 0x8915


def route_ifname(addr):
    """The name of the interface this host uses to reach addr (what gloo and NCCL need)."""
    try:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))  # UDP connect sends nothing; it only picks a route
            local = s.getsockname()[0]
    except OSError:
        return None
    return ifname_of(local)


def ifname_of(local_addr):
    import fcntl
    import struct

    if local_addr.startswith("127."):
        return "lo"
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
