"""job.notify's command (remote/host/notify.py): its environment, its order, its bounds; and
the rank torchrun's report names (remote/host/torchrun.py), which the notify message carries."""

from __future__ import annotations

import time
from pathlib import Path

from ddptui.remote.host import protocol
from ddptui.remote.host.notify import Notifier
from ddptui.remote.host.torchrun import failed_ranks


def notifier(command: str, timeout: float = protocol.NOTIFY_TIMEOUT, **spec: object) -> tuple:
    failed: list[tuple[str, str]] = []
    n = Notifier({"command": command, **spec}, "run-7", lambda e, why: failed.append((e, why)),
                 timeout=timeout)  # fmt: skip
    return n, failed


def test_each_event_runs_the_command_in_order_with_its_words(tmp_path: Path) -> None:
    out = tmp_path / "out"
    n, failed = notifier(
        f'echo "$DDPTUI_EVENT|$DDPTUI_STATUS|$DDPTUI_RUN_ID|$DDPTUI_MESSAGE" >> {out}'
    )
    n("failed", "restarting", "rank 3 failed on node1;\nrestarting in 10 s")
    n("succeeded", "succeeded", "not asked for by default")
    n("restarted", "running", "attempt 2 of 3")
    n.close(10)
    assert out.read_text().splitlines() == [
        "failed|restarting|run-7|rank 3 failed on node1; restarting in 10 s",
        "restarted|running|run-7|attempt 2 of 3",
    ]
    assert failed == [] and not n.wanted("succeeded") and n.wanted("hang")


def test_a_failing_or_endless_command_is_told_and_bounded(tmp_path: Path) -> None:
    n, failed = notifier("echo no webhook >&2; exit 7", events=["lost"])
    n("lost", "waiting", "node1 was lost")
    n.close(10)
    assert failed == [("lost", "exit 7: no webhook")]
    n, failed = notifier("echo started; sleep 60", timeout=0.5, events=["hang"])
    t0 = time.monotonic()
    n("hang", "running", "no rank printed a line for 600 s")
    n.close(10)
    assert time.monotonic() - t0 < 5
    assert failed == [("hang", "killed after 0.5 s: started")]


def test_no_command_runs_nothing() -> None:
    n = Notifier(None, "run-7", lambda e, why: None)
    n("failed", "failed", "x")
    assert n.thread is None and n.wanted("failed")


def test_torchruns_report_names_the_ranks() -> None:
    report = (
        b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        b"Failures:\n  host      : node1\n  rank      : 2 (local_rank: 0)\n  error_file: <N/A>\n"
        b"Root Cause (first observed failure):\n  rank      : 3 (local_rank: 1)\n"
        b"  exitcode  : 1 (pid: 812)\n"
    )
    assert failed_ranks(b"noise\n" + report) == [(3, 1, 1), (2, 0, None)]  # root cause first
    assert failed_ranks(b"Traceback: rank : 5\n") == []


def test_its_environment_holds_no_control_sequence_and_fits_exec(tmp_path: Path) -> None:
    """A job's OSC 52 never reaches the command's environment, and 3,000 links (each kept once,
    the first few) never make the command fail with E2BIG: its strings stay far below 128 KiB."""
    import os

    from ddptui.remote.host.progress import Tracker

    tracker = Tracker()  # type: ignore[no-untyped-call]
    lines = "".join(f"[0]:wandb: View run r{i} at https://wandb.ai/t/p/runs/{i:040}\n"
                    for i in range(3000))  # fmt: skip
    tracker.feed_text(lines + lines, 0)
    assert len(tracker.links) == 32  # type: ignore[attr-defined]
    out = tmp_path / "env"
    n, failed = notifier(f"env -0 > {out}", events=["failed"])
    n.said_links(list(tracker.links))  # type: ignore[attr-defined]
    n("failed", "failed\x1b]0;pwned\x07", "rank 0: \x1b]52;c;cm0gLXJmIH4=\x07boom \x9b2J" * 5000)
    n.close(10)
    assert failed == []
    env = dict(v.split("=", 1) for v in out.read_text().split("\0") if "=" in v)
    assert env["DDPTUI_STATUS"] == "failed"
    assert env["DDPTUI_MESSAGE"].startswith("rank 0: boom rank 0: boom")
    assert len(env["DDPTUI_MESSAGE"]) <= 8 << 10
    assert env["DDPTUI_LINKS"].split() == list(tracker.links)  # type: ignore[attr-defined]
    assert not any(c in v for v in env.values() for c in "\x1b\x07\x9b")
    assert max(len(k) + len(v) for k, v in env.items() if k.startswith("DDPTUI")) < 64 << 10
    assert os.environ.get("DDPTUI_MESSAGE") is None
