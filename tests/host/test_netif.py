"""remote/host/netif.py: the interface that routes to the master, whatever its address."""

from __future__ import annotations

import socket
from pathlib import Path

from ddptui.remote.host import netif

IP_ADDR = """\
1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: eth0    inet 10.0.0.5/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever
2: eth0    inet 10.0.0.77/24 scope global secondary eth0\\       valid_lft forever
2: eth0    inet6 fd42::5/64 scope global \\       valid_lft forever preferred_lft forever
3: veth1@if4    inet 10.9.0.1/24 scope global veth1\\       valid_lft forever
"""


def test_ip_addr_lists_secondary_and_ipv6_addresses() -> None:
    assert netif.parse_ip_addr(IP_ADDR, "10.0.0.5") == "eth0"
    assert netif.parse_ip_addr(IP_ADDR, "10.0.0.77") == "eth0"  # a secondary address
    assert netif.parse_ip_addr(IP_ADDR, "fd42::5") == "eth0"
    assert netif.parse_ip_addr(IP_ADDR, "10.9.0.1") == "veth1"  # `@if4` is not the name
    assert netif.parse_ip_addr(IP_ADDR, "10.0.0.6") is None


def test_no_address_has_no_route() -> None:
    # '' "routes" to this host itself (lo): an empty MASTER_ADDR must fail the route check.
    assert netif.route_ifname("") is None
    assert netif.route_ifname("not an address") is None


def test_loopback_both_families() -> None:
    assert netif.route_ifname("127.0.0.1") == "lo"
    if Path("/proc/net/if_inet6").exists():
        assert netif.route_ifname("::1") == "lo"


def test_ipv6_address_found_in_proc() -> None:
    """An IPv6 address of this machine (if any) maps to its interface, not to None."""
    proc = Path("/proc/net/if_inet6")
    for line in proc.read_text().splitlines() if proc.exists() else []:
        hexaddr, *_, name = line.split()
        if hexaddr.startswith("fe80") or name == "lo":
            continue
        addr = ":".join(hexaddr[i : i + 4] for i in range(0, 32, 4))
        assert netif.ifname_of(addr) == name


def test_an_auto_port_is_outside_the_ephemeral_range() -> None:
    """job.master_port: auto. Inside the range, any outgoing connection's local port could take
    it before torchrun's store binds it (EADDRINUSE, seen in CI)."""
    low, high = netif._ephemeral_range()
    for _ in range(20):
        port = netif.free_port()
        assert not low <= port <= high and port >= netif.LOWEST
        assert netif.bindable(port)
    assert all(netif.free_port((10500, 40000)) > 40000 for _ in range(20))  # room above only


def test_no_room_outside_the_range_falls_back_to_the_kernels_pick() -> None:
    assert 0 < netif.free_port((1024, 65535)) <= 65535


def test_a_listened_port_is_not_bindable() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        s.listen()
        assert not netif.bindable(s.getsockname()[1])
