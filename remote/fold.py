"""Ranks and host names folded into ranges where they are listed: `0-2,4-5`, `node[01-03,07]`.

2,048 ranks on 256 hosts only read as ranges. Host names fold the way pdsh and ClusterShell
write them (and the inventory's host ranges): a shared prefix, the numbers in brackets, zero
padding kept. Names without a trailing number are listed as they are.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

_NUMBERED = re.compile(r"^(.*?)(\d+)$")


def ranks(numbers: Iterable[int]) -> str:
    """`0-2,4-5`: sorted, each run of consecutive numbers as first-last."""
    return ",".join(_runs(sorted(set(numbers)), str))


def hosts(names: Iterable[str]) -> str:
    """`node[0-2],login`: names with a trailing number folded per prefix (and width, where
    a prefix's numbers are zero-padded)."""
    numbered: dict[str, list[str]] = {}
    plain: list[str] = []
    for name in dict.fromkeys(names):  # once each, in order
        m = _NUMBERED.match(name)
        if m is None:
            plain.append(name)
        else:
            numbered.setdefault(m[1], []).append(m[2])
    out = []
    for prefix, all_digits in numbered.items():
        padded = any(len(d) > 1 and d.startswith("0") for d in all_digits)
        by_width: dict[int, list[int]] = {}
        for d in all_digits:
            by_width.setdefault(len(d) if padded else 0, []).append(int(d))
        for width, numbers in by_width.items():
            runs = _runs(sorted(set(numbers)), f"{{:0{width}d}}".format)
            out.append(prefix + (runs[0] if len(numbers) == 1 else f"[{','.join(runs)}]"))
    return ",".join(out + plain)


def ranks_on(numbers: Iterable[int], names: Iterable[str]) -> str:
    """`rank 3 on gpu-b`, `ranks 0-5 on node[0-2]`."""
    numbers = sorted(set(numbers))
    what = f"rank {numbers[0]}" if len(numbers) == 1 else f"ranks {ranks(numbers) or 'unknown'}"
    where = hosts(names)
    return f"{what} on {where}" if where else what


def _runs(numbers: list[int], fmt: Callable[[int], str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        out.append(fmt(numbers[i]) if i == j else f"{fmt(numbers[i])}-{fmt(numbers[j])}")
        i = j + 1
    return out
