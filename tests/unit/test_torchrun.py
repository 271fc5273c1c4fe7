"""What torchrun says, read by both sides from one module (remote/host/torchrun.py): the node's
supervisor, naming the failing rank to the hub, and the launcher, finding the run's root cause,
read the same report and the same last words the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddptui.remote.events import Failure
from ddptui.remote.host.torchrun import failed_ranks, own_failure
from ddptui.remote.run.failures import FailureTracker, is_echo

# As torch 2.13's torchrun prints it: rank 2 died of a SIGTERM (the echo), rank 3 of its own error.
REPORT = (Path(__file__).parents[1] / "data" / "torchrun" / "child-failed.txt").read_text()

LAST_WORDS = [
    ("RuntimeError: Connection closed by peer [10.0.0.2]:29500", True),
    ("RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection reset by peer", True),
    ("torch.distributed.DistBackendError: NCCL communicator was aborted on rank 1", True),
    ("BrokenPipeError: [Errno 32] Broken pipe", True),
    ("Signal 15 (SIGTERM) received by PID 812", True),
    ("KeyboardInterrupt (SIGINT)", True),
    ("RuntimeError: rank 3 failed on purpose", False),
    ("ValueError: loss is nan", False),
]


def test_both_sides_read_the_same_report_alike() -> None:
    host = failed_ranks(b"noise\n" + REPORT.encode() + b"\n")
    tracker = FailureTracker()
    tracker.feed("node1", tuple((None, line) for line in REPORT.splitlines()))
    launcher = [(f.rank, f.local_rank, f.exit_code) for f in tracker.node_failures("node1", 1)]
    assert host == launcher == [(3, 1, 1), (2, 0, -15)]  # the root cause first


def torchrun_log(tmp_path: Path, last_words: str) -> str:
    """torchrun's log dir on node1, local rank 1's stderr ending with `last_words`."""
    logs = tmp_path / "run" / "attempt_0" / "1"
    logs.mkdir(parents=True)
    (logs / "stderr.log").write_text(f"Traceback (most recent call last):\n{last_words}\n")
    return str(tmp_path)


@pytest.mark.parametrize(("line", "echo"), LAST_WORDS)
def test_both_sides_tell_an_echo_alike(tmp_path: Path, line: str, echo: bool) -> None:
    """A rank whose last words say a peer went is an echo for the launcher's root cause, and the
    supervisor passes it over for a failure of a rank's own."""
    assert is_echo(Failure("node1", 3, 1, line)) is echo
    err = REPORT.encode() + b"\n"  # the job's stderr: torchrun's report names rank 3, local 1
    own = own_failure("node1", err, torchrun_log(tmp_path, line), [2, 3])
    assert own == (None if echo else "rank 3 failed on node1")
