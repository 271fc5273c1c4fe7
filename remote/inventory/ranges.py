"""Host ranges in the inventory: an entry's `host: gpu[01-64]` unfolded into its hosts and their
names, and `--exclude`'s ranges into the hosts left out (remote/fold.py reads a range)."""

from __future__ import annotations

from pathlib import Path

import yaml

from ddptui.remote import fold
from ddptui.remote.inventory.errors import InventoryError, line_of
from ddptui.remote.inventory.model import Inventory, _HostEntry, leave_out


def unfolded(
    entries: list[_HostEntry], path: Path, node: yaml.Node | None
) -> list[tuple[int, _HostEntry, str, str]]:
    """(index, entry, host, name) of every host, in order: the entries' host ranges unfolded."""
    return [
        (i, entry, address, name)
        for i, entry in enumerate(entries)
        for address, name in _unfold_entry(entry, i, path, node)
    ]


def _unfold_entry(
    entry: _HostEntry, i: int, path: Path, node: yaml.Node | None
) -> list[tuple[str, str]]:
    """(host, name) of each host an entry stands for: `host: gpu[01-64]` is 64 hosts, in order,
    named alongside by `name: n[1-64]`; a range in `name` alone puts several nodes on one host."""

    def fail(key: str, message: str) -> InventoryError:
        return InventoryError(path, line_of(node, ("hosts", i, key)), f"hosts[{i}].{message}")

    try:
        addresses = fold.unfold(entry.host)
    except fold.RangeError as exc:
        raise fail("host", f"host: {exc}") from None
    try:
        names = fold.unfold(entry.name) if entry.name else addresses
    except fold.RangeError as exc:
        raise fail("name", f"name: {exc}") from None
    if len(addresses) == 1:
        return [(addresses[0], name) for name in names]
    if len(names) != len(addresses):
        raise fail(
            "name",
            f"name: {entry.name!r} is {len(names)} name(s) but host {entry.host!r} is "
            f"{len(addresses)} hosts; write a range of as many names (or leave name out)",
        )
    return list(zip(addresses, names, strict=True))


def without(inv: Inventory, hosts: str) -> Inventory:
    """`--exclude HOSTS`: names or addresses, ranges allowed (`node[3-4],gpu07`), left out of
    this launch; node ranks close up as if they were not listed. InventoryError: one that
    names no host, or none left to run on."""
    try:
        gone = {h for part in fold.split(hosts) for h in fold.unfold(part)}
    except fold.RangeError as exc:
        raise InventoryError(inv.path, None, f"--exclude {hosts!r}: {exc}") from None
    known = {x for h in inv.everyone for x in (h.name, h.host)}
    if unknown := sorted(gone - known):
        raise InventoryError(inv.path, None, f"--exclude: no host {unknown[0]!r} in the inventory")
    return leave_out(inv, {h.name for h in inv.everyone if h.name in gone or h.host in gone})
