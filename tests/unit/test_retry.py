"""job.restart_on and the no-progress rule (remote/host/retry.py) on attempts' outcomes."""

from __future__ import annotations

from typing import Any

import pytest

from ddptui.remote.host import retry


def outcome(cause: str = "failed", code: int | None = 1, node: int = 1, rank: int | None = 3,
            lines: int = 100) -> dict[str, Any]:  # fmt: skip
    return {"cause": cause, "code": code, "node": node, "rank": rank, "lines": lines}


@pytest.mark.parametrize(
    ("restart_on", "now", "restarts"),
    [
        (None, outcome(), True),
        ([], outcome(), False),
        (["failed"], outcome(code=7), True),
        ([7, 137], outcome(code=137), True),
        ([7, 137], outcome(code=1), False),
        ([7], outcome("gpu", None), False),
        (["gpu", "lost"], outcome("gpu", None), True),
        (["gpu"], outcome("lost", None), False),
        (["hang"], outcome("hang", None), True),
    ],
)
def test_restart_on(restart_on: list[Any] | None, now: dict[str, Any], restarts: bool) -> None:
    assert retry.restarts_on(restart_on, now) is restarts
    why = retry.why_not(restart_on, None, now)
    assert (why is None) is restarts
    if not restarts:
        assert why is not None and why.startswith("job.restart_on does not name ")


def test_no_progress_stops_the_chain() -> None:
    last = outcome(lines=100)
    assert retry.why_not(None, last, outcome(lines=100)) == (
        "no progress: it failed as the last attempt did, no further"
    )
    assert retry.no_progress(last, outcome(lines=90))
    assert not retry.no_progress(last, outcome(lines=101))  # it got further
    assert not retry.no_progress(last, outcome(rank=2))  # another rank
    assert not retry.no_progress(last, outcome(code=2))  # another way
    assert not retry.no_progress(last, outcome("gpu", None))
    assert not retry.no_progress(None, outcome())  # the first failure


def test_a_straggler_swapped_for_a_spare_always_restarts() -> None:
    """job.on_straggler: replace ended the attempt: the user chose it, whatever restart_on
    says and however the attempt before failed."""
    now = outcome("straggler", None)
    assert retry.why_not(["hang"], now, now) is None


def test_with_checkpoints_no_progress_is_a_checkpoint_that_did_not_advance() -> None:
    """job.checkpoint: a resumed attempt prints fewer lines and may still go further; what
    says it got nowhere is its newest checkpoint, the same as the failed attempt's before."""
    ten = {"path": "/ckpt/step_10.pt", "step": 10, "at": 1.0}
    fifteen = {"path": "/ckpt/step_15.pt", "step": 15, "at": 2.0}
    last = outcome(lines=120) | {"saved": ten}
    assert retry.why_not(None, last, outcome(lines=20) | {"saved": fifteen}) is None
    assert retry.why_not(None, last, outcome(lines=20) | {"saved": ten}) == (
        "no progress: the newest checkpoint (step 10) did not advance over two attempts"
    )
    other = outcome("hang", None, lines=200) | {"saved": ten}  # another failure, no save
    assert retry.why_not(None, last, other) is not None
    none = outcome() | {"saved": None}
    assert retry.why_not(None, none, none) == (
        "no progress: the newest checkpoint (none yet) did not advance over two attempts"
    )
    assert retry.why_not(None, None, none) is None  # the first failure
    lost = outcome("lost", None) | {"saved": ten}  # a host's fault: no save was owed
    assert retry.why_not(None, last, lost) is None
