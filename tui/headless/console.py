"""Where the headless commands write: stdout and stderr, as a terminal or a pipe.

The text of ranks and hosts is made safe before it is written (remote/host/safetext.py's
cleaner: a rank's OSC 52 would write the user's clipboard, its title and clear-screen sequences
take over the window): ddptui's own words everywhere, ranks' lines on a terminal (`terminal_safe`,
their SGR colours kept); in a pipe or a file ranks' lines stay as written. On a terminal ddptui
keeps one live line at the bottom of stderr (`connecting 97/128 …`) that other output scrolls
above; in a pipe there is none. A closed output (`| head`
exited, the terminal gone) is said once (`on_closed`) and written to no more.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from collections.abc import Callable
from typing import TextIO

from ddptui.remote.host.safetext import clean
from ddptui.remote.store.record import BYTES_BACK

CLEAR_LINE = "\r\x1b[2K"


def terminal_safe(text: str) -> str:
    """`text` as a terminal may show it: SGR colours and carriage returns kept, every other
    escape sequence and control but newline and tab taken out."""
    return clean(text, colours=True)


def isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (ValueError, OSError):  # closed, or no file behind it
        return False


class Console:
    def __init__(
        self,
        out: TextIO,
        err: TextIO,
        on_closed: Callable[[], None] | None = None,
    ) -> None:
        self.out, self.err = out, err
        self.on_closed = on_closed  # an output went away: the caller stops the run
        self.closed = False
        self.terminals = {id(s) for s in (out, err) if isatty(s)}
        self.live = id(err) in self.terminals  # a live line only where a person watches
        self.status = ""  # the live line now shown
        for stream in (out, err):
            if isinstance(stream, io.TextIOWrapper):  # any byte a rank wrote, on any console
                stream.reconfigure(errors=BYTES_BACK)

    def write(self, dst: TextIO, text: str, lines: bool = False) -> None:
        """Text to one of the outputs, above the live line. ddptui's own words, which carry
        hosts' and ranks' text, are made safe everywhere; ranks' `lines` on a terminal only
        (their SGR colours kept): in a pipe or a file they stay as the ranks wrote them."""
        terminal = id(dst) in self.terminals
        if not lines:
            text = clean(text)
        elif terminal:
            text = terminal_safe(text)
        if terminal and self.status:  # the live line out of the way, the text, it again
            self._put(self.err, CLEAR_LINE)
            self._put(dst, text)
            self._put(self.err, self.status)
            return
        self._put(dst, text)

    def show(self, status: str) -> None:
        """The live line (a terminal only): `connecting 97/128 …`; "" takes it away."""
        if not self.live or status == self.status:
            return
        width = shutil.get_terminal_size().columns - 1
        status = clean(status)[:width]  # one row: a wrapped line cannot be redrawn
        self.status = status
        self._put(self.err, CLEAR_LINE + status)

    def _put(self, dst: TextIO, text: str) -> None:
        try:
            dst.write(text)
            dst.flush()
        except OSError:  # EPIPE (`| head` exited), EIO (the terminal is gone)
            silence(dst)
            self.terminals.discard(id(dst))
            if dst is self.err:
                self.live, self.status = False, ""
            if not self.closed:
                self.closed = True
                if self.on_closed is not None:
                    self.on_closed()


def silence(stream: TextIO) -> None:
    """Point a closed output at /dev/null: later writes, and Python's own flush at exit, go
    nowhere instead of raising (the Python docs' note on SIGPIPE)."""
    with contextlib.suppress(OSError, ValueError):  # no file descriptor: nothing to redirect
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)
