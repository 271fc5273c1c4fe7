"""remote/host/netif.py: the interface that routes to the master, whatever its address."""

from __future__ import annotations

from pathlib import Path

from remote.host import netif

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
