"""Tab completion for bash, zsh and fish, written by shtab from the `ddptui` parser itself: the
commands and options are the parser's, never a second list kept by hand.

shtab, not argcomplete: its script is static shell code, so a tab press runs no Python at all,
except for run ids, which `ddptui _run-ids` lists from the runs root (remote/store/runlist.py, no
engine imports). Inventories complete as *.yaml / *.yml files.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import shtab

INVENTORY_FILES = shtab.glob("*.yaml", "*.yml")
RUN_IDS = shtab.cmd("ddptui _run-ids")


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for `shell`, the parser's arguments told what they take."""
    for action in _actions(parser):
        if action.dest == "inventory":
            action.complete = INVENTORY_FILES  # type: ignore[attr-defined]
        elif action.dest == "run":
            action.complete = RUN_IDS  # type: ignore[attr-defined]
    return str(shtab.complete(parser, shell=shell))


def _actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """Every argument of the parser and of its commands'."""
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if not name.startswith("_"):
                    yield from _actions(sub)
