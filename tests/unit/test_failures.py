"""Root cause: torchrun's ChildFailedError report and what ranks printed, merged across hosts."""

from __future__ import annotations

from pathlib import Path

from ddptui.remote.events import Failure
from ddptui.remote.host.torchrun import parse_child_failed
from ddptui.remote.run.failures import FailureTracker, describe_exit, first, is_echo

# As torch 2.13's torchrun prints it (recorded from a real run on this machine).
REPORT = (
    (Path(__file__).parents[1] / "data" / "torchrun" / "child-failed.txt").read_text().splitlines()
)


def test_parse_child_failed_puts_root_cause_first() -> None:
    found = parse_child_failed(REPORT)
    assert [(f.rank, f.local_rank, f.exit_code, f.pid, f.root) for f in found] == [
        (3, 1, 1, 6537, True),
        (2, 0, -15, 6538, False),
    ]
    assert found[0].host == "node1"


def test_tracker_builds_failures_with_the_rank_traceback() -> None:
    t = FailureTracker()
    t.feed("node1", tuple((None, line) for line in REPORT))
    t.feed(
        "node1",
        (
            (3, "[rank3]: Traceback (most recent call last):"),
            (3, '[rank3]:   File "train.py", line 76, in main'),
            (3, "[rank3]: RuntimeError: rank 3 failed on purpose"),
        ),
    )
    failures = t.node_failures("node1", 1)
    root = failures[0]
    assert (root.host, root.rank, root.exit_code, root.pid) == ("node1", 3, 1, 6537)
    assert root.message == "RuntimeError: rank 3 failed on purpose"
    assert root.traceback[0] == "Traceback (most recent call last):"
    assert failures[1].message == "killed by SIGTERM"


def test_node_without_report_fails_as_a_whole() -> None:
    t = FailureTracker()
    t.feed("n", ((None, "Traceback (most recent call last):"), (None, "ValueError: bad")))
    [f] = t.node_failures("n", 2)
    assert (f.rank, f.exit_code, f.message) == (None, 2, "ValueError: bad")


def test_first_prefers_own_failures_over_echoes_then_time() -> None:
    echo = Failure("a", 0, 1, "RuntimeError: Connection closed by peer [1.2.3.4]:5", seen_at=1.0)
    killed = Failure("a", 1, -15, "killed by SIGTERM", seen_at=0.5)
    own = Failure("b", 3, 1, "ValueError: nan loss", seen_at=2.0)
    later = Failure("c", 5, 1, "KeyError: x", seen_at=3.0)
    assert is_echo(echo) and is_echo(killed) and not is_echo(own)
    assert first([echo, killed, later, own]) is own
    assert first([echo, killed]) is killed
    assert first([]) is None


def test_oom_kill_is_not_an_echo() -> None:
    assert not is_echo(Failure("a", 0, -9, "killed by SIGKILL (out of memory?)"))


def test_describe_exit() -> None:
    assert describe_exit(1) == "exit code 1"
    assert describe_exit(-9) == "killed by SIGKILL (out of memory?)"
    assert describe_exit(-15) == "killed by SIGTERM"
    assert describe_exit(None) == "no exit code"


def test_message_is_the_exception_even_with_a_warning_after_it() -> None:
    t = FailureTracker()
    t.feed(
        "n",
        (
            (1, "Traceback (most recent call last):"),
            (1, '  File "x.py", line 1'),
            (1, "ValueError: bad batch"),
            (1, "UserWarning: something printed on the way out"),
        ),
    )
    report = [line.replace(": 3 (local_rank: 1)", ": 1 (local_rank: 1)") for line in REPORT]
    t.feed("n", tuple((None, line) for line in report))
    assert t.node_failures("n", 1)[0].message == "ValueError: bad batch"


def test_untagged_lines_with_torch_rank_prefix_name_the_rank() -> None:
    t = FailureTracker()  # Lightning / spawn: lines carry no ddptui tag, but torch's own prefix
    t.feed(
        "node1",
        (
            (None, "[rank3]: Traceback (most recent call last):"),
            (None, "[rank3]: RuntimeError: boom"),
        ),
    )
    [f] = t.node_failures("node1", 1)
    assert (f.rank, f.message) == (3, "RuntimeError: boom")


C10D_WARNING = (
    "[W1125 00:33:30.133239418 socket.cpp:207] [c10d] The hostname of the client socket "
    "cannot be retrieved. err=-3"
)
SIGKILLED = [line.replace("exitcode  : 1 (pid: 6537)", "exitcode  : -9 (pid: 6537)")
             for line in REPORT]  # fmt: skip


def test_a_rank_killed_by_a_signal_is_named_by_it_not_by_a_warning() -> None:
    """torchrun: rank 3 SIGKILLed (no traceback); the last line it printed was c10d's."""
    t = FailureTracker()
    t.feed("node1", tuple((None, line) for line in SIGKILLED))
    t.feed("node1", ((3, "epoch 0 step 3"), (3, C10D_WARNING)))
    root = t.node_failures("node1", 1)[0]
    assert (root.rank, root.exit_code, root.message) == (
        3,
        -9,
        "killed by SIGKILL (out of memory?)",
    )


def test_a_warning_is_never_the_message() -> None:
    t = FailureTracker()
    lines = [
        "bad config: no such dataset /data/x",
        C10D_WARNING,
        "W1125 00:27:21.968000 12193 torch/distributed/elastic/agent/server/api.py:753] Received",
        "[W socket.cpp:207] [c10d] The hostname of the client socket cannot be retrieved.",
        "/opt/x.py:3: UserWarning: TypedStorage is deprecated",
        "  warnings.warn(",
        "WARNING: Logging before InitGoogleLogging()",
    ]
    t.feed("node0", tuple((None, line) for line in lines))
    (only,) = t.node_failures("node0", 2)
    assert only.message == "bad config: no such dataset /data/x"


def test_the_first_rank_to_end_names_a_node_with_no_report() -> None:
    """The env style (Lightning) has no torchrun report, and a SIGKILLed rank no traceback:
    its supervisor saw which rank process ended first, and how."""
    from ddptui.remote.run.nodemsg import RankEnd

    t = FailureTracker()
    t.feed("node1", ((None, C10D_WARNING),))
    (root,) = t.node_failures("node1", 1, at=20.0, died=RankEnd(3, -9, 12.5))
    assert (root.rank, root.exit_code, root.seen_at) == (3, -9, 12.5)
    assert root.message == "killed by SIGKILL (out of memory?)"
    # torchrun's report knew the rank but not when: the supervisor's time is taken
    t = FailureTracker()
    t.feed("node1", tuple((None, line) for line in SIGKILLED))
    root = t.node_failures("node1", 1, at=20.0, died=RankEnd(3, None, 12.5))[0]
    assert (root.rank, root.exit_code, root.seen_at) == (3, -9, 12.5)
