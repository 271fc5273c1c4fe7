"""Where the headless commands write: stdout and stderr, and what a closed one becomes."""

from __future__ import annotations

import contextlib
import os
from typing import TextIO


def silence(stream: TextIO) -> None:
    """Point a closed output at /dev/null: later writes, and Python's own flush at exit, go
    nowhere instead of raising (the Python docs' note on SIGPIPE)."""
    with contextlib.suppress(OSError, ValueError):  # no file descriptor: nothing to redirect
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)
