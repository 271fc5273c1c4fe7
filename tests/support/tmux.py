"""A real terminal for the app: one tmux server of our own; send-keys types, capture-pane
reads the screen as a user sees it."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable

from testhosts import REPO


class Tmux:
    """One tmux server of our own (its own socket), one window running a command."""

    def __init__(self, command: list[str], env: dict[str, str], size: tuple[int, int]) -> None:
        self.socket = f"ddptui-test-{os.getpid()}"
        cols, rows = size
        # Something under pytest exports COLUMNS=80 LINES=24, which tmux hands on and the app
        # believes over the terminal's own size: say the real one.
        env = {**env, "COLUMNS": str(cols), "LINES": str(rows)}
        env_args = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
        self.tmux("new-session", "-d", "-s", "t", "-x", str(cols), "-y", str(rows),
                  *env_args, "-c", str(REPO), *command)  # fmt: skip

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10
        )

    def send(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t").stdout

    @property
    def alive(self) -> bool:
        return self.tmux("has-session", "-t", "t").returncode == 0

    def kill(self) -> None:
        self.tmux("kill-server")


def wait_for(cond: Callable[[], object], what: str, timeout: float, show: Tmux) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; the screen:\n{show.screen()}")
        time.sleep(0.2)
