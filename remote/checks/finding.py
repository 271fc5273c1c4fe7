"""A finding as a judge adds it: one host's judging is handed an `add` (judge.py, container.py)."""

from __future__ import annotations

from collections.abc import Callable

from ddptui.remote.events import Finding, Level

Add = Callable[[Level, str, str], None]


def collect(host: str | None) -> tuple[list[Finding], Add]:
    """An empty list, and the `add` that puts a finding on `host` into it."""
    found: list[Finding] = []

    def add(level: Level, check: str, message: str) -> None:
        found.append(Finding(level, check, message, host))

    return found, add
