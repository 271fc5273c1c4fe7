"""Slurm's host lists, host side: `gpu[01-03,07],cpu1` expanded as `scontrol show hostnames`
does, without scontrol (a compute node may lack it, and a batch script must not depend on it).

Runs where a Slurm job runs (python3 >= 3.8, standard library only). Commas inside brackets
separate ranges, outside them hosts; zero padding is kept (`[08-10]`: 08 09 10); several
bracketed parts give every combination, left to right (`r[1-2]n[1-2]`: r1n1 r1n2 r2n1 r2n2).
"""

from __future__ import annotations

import re

_PART = re.compile(r"\[([^\]]*)\]")


def expand(text: str) -> list[str]:
    """Every host the list names, in order; ValueError for a list that is not one."""
    out = []
    for item in _items(text):
        out += _expand_one(item)
    return out


def _items(text):
    """The list's hosts, split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if depth not in (0, 1):
            raise ValueError("unbalanced brackets in {!r}".format(text))
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError("unbalanced brackets in {!r}".format(text))
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _expand_one(item):
    match = _PART.search(item)
    if match is None:
        return [item]
    head, tail = item[: match.start()], item[match.end() :]
    return [head + n + rest for n in _numbers(match.group(1), item) for rest in _expand_one(tail)]


def _numbers(ranges, item):
    out = []
    for part in ranges.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError("{!r} is not a range in {!r}".format(part, item))
        width = len(first) if first.startswith("0") or len(first) == len(last) else 0
        for n in range(int(first), int(last if dash else first) + 1):
            out.append(str(n).zfill(width))
    return out
