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
