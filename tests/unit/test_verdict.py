"""Who failed and why the run stopped (remote/run/verdict.py): each node's ending and the run's
outcome, from what the nodes said. Pure: no hosts."""

from __future__ import annotations

from ddptui.remote.events import AttemptResult, Failure
from ddptui.remote.host import protocol
from ddptui.remote.run.failures import FailureTracker
from ddptui.remote.run.nodemsg import Exit, RankEnd, StartError, parse
from ddptui.remote.run.verdict import Attempts, NodeEnding, Tracebacks, Verdict

NAMES = {0: "node0", 1: "node1", 2: "node2"}


def tracebacks_of(*failures: Failure) -> Tracebacks:
    """What each host's rank stderr showed, by host."""

    def tracebacks(host: str, code: int | None, at: float) -> list[Failure]:
        return [f for f in failures if f.host == host]

    return tracebacks


def ended(
    v: Verdict,
    name: str,
    end: Exit | StartError | None,
    gone: str = "its supervisor died",
    tracebacks: Tracebacks | None = None,
) -> NodeEnding:
    tracebacks = tracebacks or tracebacks_of()
    return v.ended(name, end, 10.0, gone=gone, tracebacks=tracebacks, peer_name=NAMES.get)


def exit_(
    code: int | None,
    stopped: bool = False,
    by: str | None = None,
    reason: str | None = None,
    node: int | None = None,
    left: tuple[str, ...] = (),
) -> Exit:
    return Exit(code, stopped, by, reason, node, left)


def test_every_node_done_is_success() -> None:
    v = Verdict()
    for name in NAMES.values():
        assert ended(v, name, exit_(0)).state == "done"
    assert v.outcome() == ("succeeded", 0, None, ())


def test_a_failed_rank_is_the_root_and_the_others_stopped_are_its_echo() -> None:
    v = Verdict()
    own = Failure("node1", 3, 1, "ValueError: bad batch", seen_at=5.0)
    echo = Failure("node0", 0, -15, "killed by SIGTERM", seen_at=6.0)
    tracebacks = tracebacks_of(own, echo)
    ending = ended(v, "node1", exit_(1), tracebacks=tracebacks)
    assert (ending.state, ending.detail, ending.failures) == ("failed", own.message, (own,))
    v.stop("failure", 5.5)
    stopped = ended(v, "node0", exit_(-15, True, "peer", node=1), tracebacks=tracebacks)
    assert (stopped.state, stopped.stopped) == ("stopped", True)
    status, code, root, ordered = v.outcome()
    assert (status, code, root) == ("failed", 1, own)
    assert ordered == (own,)  # node0's TERM came after the stop: an echo, not a failure


def test_a_host_whose_gpu_failed_is_the_cause_over_the_ranks_it_took_down() -> None:
    """node1 stopped its job for its GPU: node0's ranks then lost their peer (a traceback of
    their own, seen later): the GPU is the root cause."""
    v = Verdict()
    why = "GPU 3 (00000000:5D:00.0) on node1: 2 uncorrectable ECC errors"
    reset = Failure("node0", 0, 1, "RuntimeError: Connection reset by peer", seen_at=12.0)
    end, bad = exit_(-15, True, "health", why, 1), tracebacks_of(reset)
    sick = v.ended(
        "node1", end, 13.0, gone="", tracebacks=bad, peer_name=NAMES.get, stopped_at=11.0
    )
    assert (sick.state, sick.detail) == ("failed", why)
    ended(v, "node0", exit_(1), tracebacks=tracebacks_of(reset))
    status, _, root, _ = v.outcome()
    assert (status, root) == ("failed", Failure("node1", None, None, why, seen_at=11.0))


def test_a_health_verdict_carries_its_evidence_bounded_and_safe_to_show() -> None:
    """What the host's watch read (each read's exit, stderr, row) reaches the run's failure; a
    host's words are data: a few lines, each bounded, no terminal command in them."""
    said = ["nvidia-smi read 1: killed by SIGKILL (not by ddptui); stdout ''; stderr ''",
            "nvidia-smi read 2: exit 15; stderr '\x1b]52;c;aGk=\x07Unknown Error'"]  # fmt: skip
    msg = {"t": protocol.EXIT, "code": -15, "stopped": True, "by": "health", "node": 1,
           "reason": "GPUs cannot be read", "evidence": said + ["x" * 9000] * 20}  # fmt: skip
    end = parse(msg)
    assert isinstance(end, Exit)
    assert end.evidence[:2] == (said[0], "nvidia-smi read 2: exit 15; stderr 'Unknown Error'")
    assert len(end.evidence) == 8 and max(map(len, end.evidence)) <= 1024
    v = Verdict()
    sick = v.ended("node1", end, 13.0, gone="", tracebacks=tracebacks_of(), peer_name=NAMES.get)
    assert sick.failures[0].evidence == end.evidence


def test_a_user_stop_makes_later_failures_its_echo() -> None:
    v = Verdict()
    assert v.stop("user", 1.0) and not v.stop("failure", 2.0)  # the first cause counts
    ending = ended(v, "node0", exit_(1), tracebacks=tracebacks_of(Failure("node0", 0, 1, "x")))
    assert ending.state == "failed"  # shown as it ended...
    assert v.outcome()[:3] == ("stopped", 130, None)  # ...but the run was stopped


def test_a_stop_from_elsewhere_names_its_cause() -> None:
    v = Verdict()
    ended(v, "node0", exit_(-15, True, "launcher"))  # `ddptui stop` from another terminal
    assert v.cause == "user" and v.outcome()[0] == "stopped"
    v = Verdict()
    lease = ended(v, "node0", exit_(-15, True, "lease", reason="no launcher heard from for 60 s"))
    assert lease.errors == ("stopped: no launcher heard from for 60 s",)
    assert v.outcome()[:3] == ("lost", 1, None)  # lost: the hosts stopped it, nobody is blamed


def test_the_hubs_word_names_a_node_that_could_tell_nothing() -> None:
    """node2's supervisor died with the host; the hub stopped the others because of it."""
    v = Verdict()
    why = "node 2 (node2) lost: its supervisor was not heard from for 60 s"
    ended(v, "node0", exit_(-15, True, "peer", node=2, reason=why))
    status, _, root, _ = v.outcome()
    assert status == "failed" and root is not None
    assert (root.host, root.message) == ("node2", why)


def test_the_hubs_view_comes_before_a_cut_off_peers() -> None:
    """A detached run, node1 cut off: it stopped because it lost the hub, and said so a moment
    before node 0 said node1 was lost. Node 0's word is the hub's view: node1 is named."""
    v = Verdict()
    hub_lost = "lost the run's hub (node 0's supervisor): not heard from for 60 s"
    peer_lost = "node 1 (node1) lost: its supervisor was not heard from for 60 s"
    for name, node, why, at, hub in (
        ("node1", 0, hub_lost, 9.87, False),
        ("node2", 1, peer_lost, 10.01, False),
        ("node0", 1, peer_lost, 10.0, True),
    ):
        end = exit_(-15, True, "peer", node=node, reason=why)
        v.ended(name, end, at, gone="", tracebacks=tracebacks_of(), peer_name=NAMES.get, hub=hub)
    _, _, root, _ = v.outcome()
    assert root is not None and (root.host, root.message) == ("node1", peer_lost)


def test_what_a_node_prints_once_told_to_stop_is_its_echo() -> None:
    """torchrun, TERMed by its supervisor, prints a SignalException traceback: after the
    node's own STOPPING word, so never its failure, even where the first stop was later."""
    v = Verdict()
    term = Failure("node1", None, 1, "SignalException: Process 7 got signal: 15", seen_at=9.5)
    why = "node 1 (node1) lost: its supervisor was not heard from for 60 s"
    end = exit_(1, True, "peer", node=0, reason="lost the run's hub")
    v.ended("node1", end, 10.0, gone="", tracebacks=tracebacks_of(term), peer_name=NAMES.get,
            stopped_at=9.4)  # fmt: skip
    end = exit_(-15, True, "peer", node=1, reason=why)
    v.ended("node0", end, 10.0, gone="", tracebacks=tracebacks_of(term), peer_name=NAMES.get,
            stopped_at=10.0, hub=True)  # fmt: skip
    _, _, root, ordered = v.outcome()
    assert root is not None and (root.host, root.message) == ("node1", why)
    assert term not in ordered


def test_no_word_at_all_is_named_as_such() -> None:
    v = Verdict()
    lost = ended(v, "node1", None, gone="lost: not heard from for 60 s (network cut or host down)")
    assert lost.state == "failed" and lost.failures[0].message.startswith("lost: not heard")
    start = ended(v, "node2", StartError("cannot start /opt/venv/bin/python: No such file"))
    assert start.detail == "cannot start /opt/venv/bin/python: No such file"
    assert v.outcome()[0] == "failed"


def test_survivors_are_said_whatever_the_ending() -> None:
    v = Verdict()
    done = ended(v, "node0", exit_(0, left=("pid 9 (python) in D state",)))
    assert done.state == "done" and done.errors == (
        "pid 9 (python) in D state could not be killed",
    )


def test_outcome_before_any_node() -> None:
    refused = Failure("node1", None, None, "check failed (script): no train.py", seen_at=0.0)
    assert Verdict().outcome([refused])[:3] == ("failed", 1, refused)
    assert Verdict().outcome([refused], unreachable=True)[:2] == ("unreachable", 3)
    assert Verdict().outcome(detached=True)[:2] == ("detached", 0)


# -- attempts (job.restarts) --------------------------------------------------------------------


def test_the_run_is_its_last_attempts_and_each_attempt_is_kept() -> None:
    a = Attempts()
    assert not a.seen(0, 10.0) and not a.seen(0, 11.0)
    own = Failure("node1", 3, 1, "RuntimeError: once", seen_at=12.0)
    assert ended(a.of(0), "node1", exit_(1), tracebacks=tracebacks_of(own)).state == "failed"
    a.of(0).stop("failure", 12.5)
    a.seen(0, 13.0)
    assert a.seen(1, 20.0)  # a new attempt: its verdict starts afresh
    assert a.verdict is a.of(1) and a.verdict.cause is None
    for name in ("node0", "node1"):
        ended(a.of(1), name, exit_(0))
    a.seen(1, 30.0)
    (status, code, root, _), attempts = a.outcome()
    assert (status, code, root) == ("succeeded", 0, None)
    assert attempts == (
        AttemptResult(0, 10.0, 13.0, "failed", own),
        AttemptResult(1, 20.0, 30.0, "succeeded", None),
    )


def test_a_late_ending_counts_for_its_own_attempt() -> None:
    """node1's report of attempt 0 read after attempt 1 began (streams apart) is attempt 0's."""
    a = Attempts()
    a.seen(0, 1.0)
    a.seen(1, 5.0)
    ended(a.of(0), "node1", exit_(1), tracebacks=tracebacks_of(Failure("node1", 2, 1, "x")))
    assert a.of(0).failures and not a.of(1).failures


def test_the_hubs_word_names_an_attempt_no_node_told_of() -> None:
    """An attach after the lost host's attempt: only node 0's hub says why it restarted."""
    a = Attempts()
    a.seen(0, 1.0)
    a.hub_said(0, "node1", "node1 was lost", 4.0)
    a.seen(1, 5.0)
    ended(a.of(1), "node0", exit_(0))
    _, attempts = a.outcome()
    assert attempts[0].status == "failed" and attempts[0].failure is not None
    assert (attempts[0].failure.host, attempts[0].failure.message) == ("node1", "node1 was lost")
    own = Failure("node1", 0, 1, "ValueError")  # a node's own words win over the hub's
    b = Attempts()
    ended(b.of(0), "node1", exit_(1), tracebacks=tracebacks_of(own))
    b.hub_said(0, "node1", "rank 0 failed on node1", 4.0)
    assert b.of(0).peer_failures == []


def test_a_run_that_never_started_has_no_attempt() -> None:
    (status, code, _, _), attempts = Attempts().outcome([Failure("node0", None, None, "no torch")])
    assert (status, code, attempts) == ("failed", 1, ())


def test_an_echo_alone_is_never_named_the_root_cause() -> None:
    """spawn: node0's rank 0 aborted when its peer's connection closed (gloo, SIGABRT), and its
    node said so first; node1, the failing one, was stopped before its traceback came. No
    rank is named: the root cause says a peer failed first."""
    v = Verdict()
    echo = Failure("node0", 0, -6, "RuntimeError: Connection closed by peer [10.0.0.2]:29500")
    ended(v, "node0", exit_(1), tracebacks=tracebacks_of(echo))
    v.stop("failure", 5.0)
    ended(v, "node1", exit_(-15, True, "peer", node=0, reason="rank 0 failed on node0"))
    status, code, root, ordered = v.outcome()
    assert (status, code, ordered) == ("failed", 1, (echo,))
    assert root is not None and (root.host, root.rank, root.exit_code) == ("node0", None, -6)
    assert root.message == (
        "rank 0 died of a peer's failure (RuntimeError: Connection closed by peer "
        "[10.0.0.2]:29500); the failing peer's own error was not seen"
    )


def test_spawns_quoted_traceback_under_an_echo_rank_keeps_its_words() -> None:
    """spawn: node1's rank 2 aborted first (SIGABRT: its peer's connection closed), and the
    node's traceback is its parent quoting rank 3's own error. The echo's rank is not named;
    the words are the cause's."""
    tracker = FailureTracker()
    quoted = ["Traceback (most recent call last):", '  File "spawn.py", line 9, in _wrap',
              "RuntimeError: rank 3 failed on purpose"]  # fmt: skip
    tracker.feed("node1", tuple((None, line) for line in quoted), at=4.0)
    own = tracker.node_failures("node1", 1, died=RankEnd(2, -6, 4.0))
    assert [(f.rank, f.exit_code) for f in own] == [(2, -6)]  # the echo's rank, the cause's words
    v = Verdict()
    ended(v, "node1", exit_(1), tracebacks=lambda host, code, at: own)
    root = v.outcome()[2]
    assert root is not None and (root.host, root.rank) == ("node1", None)
    assert root.message == "RuntimeError: rank 3 failed on purpose"
