"""Hostile job text: lines of 256 KiB shaped to make a backtracking regex take minutes, fed to
every parser that reads what a rank or a host printed (issue 37), each beside a heartbeat
thread that must never stop.

Run as a script (tests/unit/test_hostile_text.py does, so that a parser that never returns can
be killed): it says `start NAME` before each case and `done NAME SECONDS GAP` after it (GAP: the
longest the heartbeat went without a beat).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator

LINE = 256 << 10  # the most a host passes on as one line (remote/host/wire.py: RECORD_MAX)
BEAT_S = 0.01


def _fill(head: str, unit: str, tail: str = "x") -> str:
    return head + unit * ((LINE - len(head) - len(tail)) // len(unit)) + tail


# name -> one line (no newline). Each shape aims at a pattern that would backtrack on it.
SHAPES = {
    "step-then-letters": _fill("step 1 ", "a"),  # key=value pairs tried from every letter
    "rate-then-digits": _fill("it/s ", "1"),  # tqdm's count tried from every digit
    "rich-spaces": _fill("Epoch 1/2 ", " ", "1/2 x"),  # two quantifiers over the same spaces
    "rich-bar": _fill("Epoch 1/2 ", "━ ", "1/2 0:00 • 0:00 x"),
    "dict-digits": _fill("{'a': ", "1", "x}"),  # a number's digits split every way
    "dict-keys": _fill("{'", "a': 1, '", "}"),
    "pairs": _fill("step 1/2 ", "a="),
    "pair-spaces": _fill("step 1/2 a", " ", "x"),
    "bars-unclosed": _fill("it/s ", "1 [0:0, 1it/s"),
    "bar-percent": _fill("it/s ", "1%|"),
    "epochs": _fill("", "epoch ", "it/s"),
    "words-warning": _fill("", "a", "Warning"),  # failures.py's warning rule
    "rank-prefix": _fill("[rank", "1"),
    "torchrun-field": _fill("  rank : ", "1 (local_rank: "),
    "tracebacks": _fill("Traceback (most recent call last):", '  File "x", line 1'),
    "link-names": _fill("wandb: ", "View run "),
    "link-url": _fill("wandb: View run at https://", "a"),
    "comet": _fill("COMET INFO: ", "live on comet.com "),
    "xid": _fill("NVRM: Xid (PCI:", "0:"),
    "missing-ranks": _fill("missing ranks: {", "1, "),
    "redrawn": _fill("", "\r 1/2 [0:0, 1it/s"),
    "returns": _fill("", "\r"),
    "escapes": _fill("", "\x1b["),
    "osc-unterminated": _fill("\x1b]52;c;", "A"),
    "dcs-many": _fill("", "\x1bP1"),
    "controls": _fill("", "\x07\x9b"),
    "timing": _fill("node1: said", ", 1", " s"),
}


def printed(line: str, size: int) -> str:
    """What a job prints of a shape: its head and its last 8 characters, `size` bytes at most in
    UTF-8 (a host passes a longer line on in pieces: wire.RECORD_MAX)."""
    room = size - len(line[-8:].encode())
    return line[:room].encode()[:room].decode(errors="ignore") + line[-8:]


def _parsers() -> dict[str, Callable[[str], object]]:
    """name -> a parser's entry point, fed one line of a rank's (or a host's) text."""
    from ddptui.remote.host import hangtraces, health, ranktag, torchrun
    from ddptui.remote.host.progress import Tracker
    from ddptui.remote.run import ranktag as run_ranktag
    from ddptui.remote.run.failures import FailureTracker
    from ddptui.remote.run.progress import ProgressReader
    from ddptui.tui.dashboard.logbuffer import clean
    from ddptui.tui.headless.console import terminal_safe
    from ddptui.tui.text import Fold

    def node0(line: str) -> None:  # node 0's supervisor: its ranks' spooled bytes
        Tracker().feed_bytes(f"[0]:{line}\n".encode(), 0)  # type: ignore[no-untyped-call]

    def job_progress(line: str) -> None:  # job.progress: the user's own, on the bounded part
        Tracker(r"it (?P<step>\d+) of (?P<total>\d+)").feed_text(f"[0]:{line}\n", 0)  # type: ignore[no-untyped-call]

    def launcher(line: str) -> None:  # the launcher's relay
        ProgressReader(None, lambda event: None).feed(f"[1]:{line}\n[1]:{line}\n", 0)

    def failures(line: str) -> None:
        tracker = FailureTracker()
        tracker.feed("node0", ((3, line), (None, line), (3, "Traceback (most recent call last):"),
                               (3, '  File "x", line 1'), (3, line)))  # fmt: skip
        tracker.node_failures("node0", 1)

    def fold(line: str) -> None:
        same = Fold({"node1": "10.0.0.1"})
        same.add("node1", line)
        same.take()

    return {
        "node0-progress": node0,
        "job.progress": job_progress,
        "launcher-progress": launcher,
        "failures": failures,
        "torchrun-report": lambda line: torchrun.parse_child_failed([line, line]),
        "echo": torchrun.is_echo_text,
        "host-ranktag": lambda line: list(ranktag.untag(f"[0]:{line}\n")),  # type: ignore[no-untyped-call]
        "launcher-ranktag": lambda line: run_ranktag.untag(f"[0]:{line}\n"),
        "xid": lambda line: health.xid_issues([line], {}),
        "flight-verdict": hangtraces.missing_ranks,
        "log-view": clean,
        "console": terminal_safe,
        "fold": fold,
    }


class Heartbeat:
    """A thread that beats every BEAT_S; `gap` is the longest it went without one."""

    def __init__(self) -> None:
        self.gap = 0.0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join()

    def _beat(self) -> None:
        last = time.monotonic()
        while True:
            stopped = self.stopped.wait(BEAT_S)
            now = time.monotonic()
            self.gap = max(self.gap, now - last)  # the last one too: a parse that held the GIL
            last = now
            if stopped:
                return


def cases() -> Iterator[tuple[str, Callable[[str], object], str]]:
    for parser, parse in _parsers().items():
        for shape, line in SHAPES.items():
            yield f"{parser}/{shape}", parse, line


def main() -> None:
    for name, parse, line in cases():
        print("start", name, flush=True)
        with Heartbeat() as beat:
            t0 = time.perf_counter()
            parse(line)
            took = time.perf_counter() - t0
        print("done", name, f"{took:.4f}", f"{beat.gap:.4f}", flush=True)
    print("all", flush=True)


if __name__ == "__main__":
    sys.exit(main())
