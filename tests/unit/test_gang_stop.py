"""A stop that ends the run, said once by the launcher (remote/run/gang.py), whoever's it is: its
own stop's at once, else the hosts' word of it (another launcher's stop, the lease), a failure's
stop never; an attach that replays the word counts down only what is left of the grace."""

from __future__ import annotations

import time
from typing import Any, cast

import pytest

from ddptui.remote.agents.silence import Silence
from ddptui.remote.events import Event, Stopping
from ddptui.remote.run import nodemsg
from ddptui.remote.run.gang import Gang


def gang() -> tuple[Gang, list[Event]]:
    said: list[Event] = []
    return Gang("r", cast(Any, None), said.append, Silence(10), 5.0), said


@pytest.mark.parametrize(
    ("by", "heard"),
    [("launcher", [Stopping(30, "ckpt")]), ("lease", [Stopping(30, "ckpt")]), ("peer", [])],
)
def test_a_halt_heard_from_the_hosts_is_said_once_a_failures_stop_never(
    by: str, heard: list[Event]
) -> None:
    g, said = gang()
    for _ in range(3):  # every node says it
        g._heard_stop(nodemsg.Stopping(by, "", None, 30.0, "ckpt"), time.time(), replayed=False)
    assert said == heard


def test_the_launchers_own_stop_is_said_and_the_hosts_word_not_again() -> None:
    g, said = gang()
    g.say_stopping(Stopping(30, "ckpt"))
    g._heard_stop(nodemsg.Stopping("launcher", "", None, 30.0, "ckpt"), time.time(), False)
    assert said == [Stopping(30, "ckpt")]


def test_a_replayed_stop_counts_down_what_is_left_and_one_over_is_not_said() -> None:
    g, said = gang()
    g._heard_stop(nodemsg.Stopping("launcher", "", None, 30.0, None), time.time() - 60, True)
    assert said == []  # KILL came long ago
    g._heard_stop(nodemsg.Stopping("launcher", "", None, 30.0, None), time.time() - 10, True)
    [stop] = said
    assert isinstance(stop, Stopping) and 19 <= (stop.left or 0) <= 20


def test_a_supervisor_that_says_no_grace_is_not_said_for() -> None:
    g, said = gang()
    g._heard_stop(nodemsg.Stopping("launcher", "", None), time.time(), False)
    assert said == []
