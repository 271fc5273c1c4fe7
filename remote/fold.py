"""Host ranges both ways: folded where ranks and hosts are listed (`0-2,4-5`, `node[01-03,07]`),
unfolded where the inventory writes them (`host: gpu[01-64]`).

2,048 ranks on 256 hosts only read as ranges. Host names fold the way pdsh and ClusterShell
write them (and the inventory's host ranges): a shared prefix and suffix, the numbers in
brackets, zero padding kept (`gpu[01-128]`, `node[1-256]-ib`). Names without a number are
listed as they are.

Unfolding is written here rather than taken from ClusterShell's NodeSet: a NodeSet is a sorted
set (the inventory's order is the node ranks'), and its syntax gives meaning to `,`, `@`, `!`
that an ssh_config alias may hold. A bracket is a numeric range list (`[1-4,7]`) or a mistake,
said with the character it is at; an IPv6 address in brackets (`[fe80::1]`) is a name.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

_NUMBERED = re.compile(r"^([^\[\],]*?)(\d+)([^\d\[\],]*)$")  # prefix, the last number, suffix
_ITEM = re.compile(r" *([0-9]+) *(?:- *([0-9]+) *)?")
MAX_UNFOLD = 100_000  # names one pattern may stand for: a typo'd [1-1000000] is a mistake
MAX_DIGITS = 12  # a bound longer than this is a typo (and int() of thousands of digits fails)


class RangeError(ValueError):
    """A host range that cannot be unfolded, in words for the inventory's author; `at` is the
    0-based character of the pattern it is about."""

    def __init__(self, pattern: str, at: int, message: str) -> None:
        self.pattern, self.at = pattern, at
        shown = pattern if len(pattern) <= 60 else pattern[:57] + "..."
        super().__init__(f"{shown!r}: {message} (at character {at + 1})")


def unfold(pattern: str) -> list[str]:
    """`gpu[01-03]` → gpu01, gpu02, gpu03, in the order written; several brackets multiply
    (`r[1-2]n[1-2]` → r1n1, r1n2, r2n1, r2n2). A number with a leading zero sets the width.
    The count is checked before any name is built."""
    parts = _parse(pattern)
    count = 1
    for part in parts:
        if not isinstance(part, str):
            count *= sum(hi - lo + 1 for lo, hi, _ in part.items)
            if count > MAX_UNFOLD:
                raise RangeError(pattern, part.at, f"stands for more than {MAX_UNFOLD:,} hosts")
    out = [""]
    for part in parts:
        if isinstance(part, str):
            out = [head + part for head in out]
        else:
            numbers = [f"{n:0{w}d}" for lo, hi, w in part.items for n in range(lo, hi + 1)]
            out = [head + n for head in out for n in numbers]
    return out


def names(text: str) -> list[str]:
    """Every name of a comma-separated list of patterns (`node[1-3],gpu07`), in order."""
    return [name for pattern in split(text) for name in unfold(pattern)]


def split(text: str) -> list[str]:
    """`node[1-3,7],gpu07` → the patterns `node[1-3,7]` and `gpu07`: commas outside brackets
    part them (a command line's list of hosts, as pdsh -w takes it)."""
    return [p.strip() for p in re.split(r",(?![^\[]*\])", text) if p.strip()]


@dataclass(frozen=True)
class _Range:
    at: int  # where its '[' is
    items: list[tuple[int, int, int]]  # (first, last, zero-padded width) of each item


def _parse(pattern: str) -> list[str | _Range]:
    """Text and ranges, in order; raises RangeError at the first character it cannot read."""
    if pattern.startswith("[") and pattern.endswith("]") and _ipv6(pattern[1:-1]):
        return [pattern]  # an IPv6 address, as ssh_config writes one
    parts: list[str | _Range] = []
    i = 0
    while i < len(pattern):
        opening, closing = pattern.find("[", i), pattern.find("]", i)
        if closing != -1 and (opening == -1 or closing < opening):
            raise RangeError(pattern, closing, "']' closes no range")
        if opening == -1:
            parts.append(pattern[i:])
            break
        parts.append(pattern[i:opening])
        if closing == -1:
            raise RangeError(pattern, opening, "unclosed range: '[' has no ']'")
        nested = pattern.find("[", opening + 1, closing)
        if nested != -1:
            raise RangeError(pattern, nested, "a range inside a range")
        parts.append(_Range(opening, _items(pattern, opening)))
        i = closing + 1
    return parts


def _ipv6(text: str) -> bool:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0]).version == 6
    except ValueError:
        return False


def _items(pattern: str, opening: int) -> list[tuple[int, int, int]]:
    """The numbers of the bracket at `opening`: `1-4,7`, each bound a decimal number."""
    out: list[tuple[int, int, int]] = []
    at = opening + 1
    for item in pattern[at : pattern.index("]", at)].split(","):
        m = _ITEM.fullmatch(item)
        if m is None:
            raise RangeError(pattern, at + _first_wrong(item), _why(item))
        lo, hi = m[1], m[2] or m[1]
        if max(len(lo), len(hi)) > MAX_DIGITS:
            raise RangeError(pattern, at, f"a bound of more than {MAX_DIGITS} digits")
        if int(hi) < int(lo):
            raise RangeError(pattern, at, f"range {lo}-{hi} goes backwards")
        out.append((int(lo), int(hi), len(lo) if lo.startswith("0") else 0))
        at += len(item) + 1
    return out


def _first_wrong(item: str) -> int:
    """Where an item stops being `number` or `number-number`."""
    for k, ch in enumerate(item):
        if ch not in "0123456789 -":
            return k
    dash = item.strip()[:1] == "-"
    return item.find("-") if dash else max(item.rfind("-"), 0)


def _why(item: str) -> str:
    text = item.strip()
    if not text:
        return "empty range: write numbers, as in [1-4] or [1,3,5]"
    if text.endswith("-"):
        return f"range {text} has no end"
    if text.startswith("-"):
        return f"range {text} has no start"
    return f"{text!r} is not a range: ranges are numeric, as in [1-4] or [1,3,5]"


def ranks(numbers: Iterable[int]) -> str:
    """`0-2,4-5`: sorted, each run of consecutive numbers as first-last."""
    return ",".join(_runs(sorted(set(numbers)), str))


def hosts(names: Iterable[str]) -> str:
    """`node[0-2],login`: names that differ only in one number folded per prefix and suffix,
    each run of numbers under one padding width where unfolding gives the same names back
    (`gpu[01-128]`: gpu01 ... gpu99, gpu100 ... gpu128)."""
    numbered: dict[tuple[str, str], list[str]] = {}
    plain: list[str] = []
    for name in dict.fromkeys(names):  # once each, in order
        m = _NUMBERED.match(name)
        if m is None:
            plain.append(name)
        else:
            numbered.setdefault((m[1], m[3]), []).append(m[2])
    out = []
    for (prefix, suffix), digits in numbered.items():
        runs = _padded_runs(sorted(digits, key=lambda d: (int(d), len(d))))
        middle = runs[0] if len(digits) == 1 else f"[{','.join(runs)}]"
        out.append(prefix + middle + suffix)
    return ",".join(out + plain)


def _padded_runs(digits: list[str]) -> list[str]:
    """`01`,`02`,...,`128` → ["01-128"]: runs of consecutive numbers whose every name the
    first one's width writes back as it is (a width pads, never cuts: 100 under width 2 is
    100); `1`, `01`, `2` → ["1-2", "01"]."""
    runs: list[list[str]] = []
    open_runs: dict[tuple[int, int], list[str]] = {}  # (width, the number it takes next) -> run
    for d in sorted(digits, key=lambda d: (int(d), len(d))):
        n = int(d)
        widths = [w for w in range(len(d) + 1) if f"{n:0{w}d}" == d]  # that write d back
        run = next((open_runs.pop((w, n)) for w in widths if (w, n) in open_runs), None)
        if run is None:
            run = []
            runs.append(run)
        run.append(d)
        first = run[0]
        open_runs[(len(first) if first.startswith("0") else 0, n + 1)] = run
    return [r[0] if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs]


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
