"""Host ranges both ways: folded where ranks and hosts are listed (`0-2,4-5`, `node[01-03,07]`),
unfolded where the inventory writes them (`host: gpu[01-64]`).

2,048 ranks on 256 hosts only read as ranges. Host names fold the way pdsh and ClusterShell
write them (and the inventory's host ranges): a shared prefix, the numbers in brackets, zero
padding kept. Names without a trailing number are listed as they are.

Unfolding is written here rather than taken from ClusterShell's NodeSet: a NodeSet is a sorted
set (the inventory's order is the node ranks'), and its syntax gives meaning to `,`, `@`, `!`
and brackets that an IPv6 address (`[fe80::1]`) or an ssh_config alias may hold. Only a bracket
of numbers and ranges (`[1-4,7]`) is a range; anything else stays as written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

_NUMBERED = re.compile(r"^(.*?)(\d+)$")
_RANGE = re.compile(r"\[(\s*\d+\s*(?:-\s*\d+\s*)?(?:,\s*\d+\s*(?:-\s*\d+\s*)?)*)\]")
MAX_UNFOLD = 100_000  # names one pattern may stand for: a typo'd [1-1000000] is a mistake


class RangeError(ValueError):
    """A host range that cannot be unfolded, in words for the inventory's author."""


def unfold(pattern: str) -> list[str]:
    """`gpu[01-03]` → gpu01, gpu02, gpu03, in the order written; several brackets multiply
    (`r[1-2]n[1-2]` → r1n1, r1n2, r2n1, r2n2). A number with a leading zero sets the width."""
    parts = _RANGE.split(pattern)  # text, range, text, range, ..., text
    out = [parts[0]]
    for spec, text in zip(parts[1::2], parts[2::2], strict=True):
        numbers = _numbers(spec, pattern)
        if len(out) * len(numbers) > MAX_UNFOLD:
            raise RangeError(f"{pattern!r} stands for more than {MAX_UNFOLD:,} hosts")
        out = [head + n + text for head in out for n in numbers]
    return out


def split(text: str) -> list[str]:
    """`node[1-3,7],gpu07` → the patterns `node[1-3,7]` and `gpu07`: commas outside brackets
    part them (a command line's list of hosts, as pdsh -w takes it)."""
    return [p.strip() for p in re.split(r",(?![^\[]*\])", text) if p.strip()]


def _numbers(spec: str, pattern: str) -> list[str]:
    out: list[str] = []
    for item in spec.split(","):
        lo, _, hi = (s.strip() for s in item.partition("-"))
        hi = hi or lo
        if int(hi) < int(lo):
            raise RangeError(f"{pattern!r}: range {lo}-{hi} goes backwards")
        width = len(lo) if lo.startswith("0") else 0
        out += [f"{n:0{width}d}" for n in range(int(lo), int(hi) + 1)]
        if len(out) > MAX_UNFOLD:
            raise RangeError(f"{pattern!r} stands for more than {MAX_UNFOLD:,} hosts")
    return out


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
