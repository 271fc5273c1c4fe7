"""The contract between launcher and host (remote/host/protocol.py) and the typed values the
launcher reads a node's messages into (remote/run/nodemsg.py): keys, defaults, and what a host may
not send."""

from __future__ import annotations

import ast
import inspect

import pytest

from ddptui.remote.host import protocol, wire
from ddptui.remote.run import nodemsg

REQUIRED = {"run_id": "r", "node": 0, "names": ["a"], "argv": ["python3", "t.py"], "secret": "s"}


def test_a_spec_gets_every_default() -> None:
    spec = protocol.spec(REQUIRED)
    assert set(spec) == set(protocol.SPEC_DEFAULTS)
    assert spec["grace"] == 5.0 and spec["link_timeout"] == 60.0 and spec["env"] == {}
    assert spec["ranks"] == [] and not spec["tail_ranks"] and not spec["detached"]
    spec["env"]["X"] = "1"  # each spec its own copies of the mutable defaults
    assert protocol.spec(REQUIRED)["env"] == {}


def test_a_spec_with_an_unknown_or_missing_key_is_refused() -> None:
    with pytest.raises(protocol.SpecError, match="unknown spec keys: tee"):
        protocol.spec({**REQUIRED, "tee": 3})
    missing = {k: v for k, v in REQUIRED.items() if k != "secret"}
    with pytest.raises(protocol.SpecError, match="the spec lacks secret"):
        protocol.spec(missing)


def test_beats_fit_the_lease() -> None:
    assert protocol.beat_interval(60) == 5.0
    assert protocol.beat_interval(6) == 1.0
    assert protocol.beat_interval(0.1) == 0.2


def test_every_op_is_served() -> None:
    from ddptui.remote.host import agent

    assert set(agent.OPS) == set(protocol.OPS)


@pytest.mark.parametrize(
    ("msg", "want"),
    [
        (
            {"t": "started", "pid": 7, "hostname": "n0", "ifname": "eth0", "hub_port": 4,
             "mode": "attached", "ranks": [0, 1]},
            nodemsg.Started(7, "n0", "eth0", 4, "attached", (0, 1)),
        ),
        ({"t": "ranks", "ranks": [2, 3], "world": 4}, nodemsg.Ranks((2, 3), 4)),
        (
            {"t": "stopping", "by": "peer", "reason": "node 1 failed", "node": 1},
            nodemsg.Stopping("peer", "node 1 failed", 1),
        ),
        (
            {"t": "stopping", "by": "launcher", "reason": "", "node": None, "grace": 30,
             "checkpoint": "ckpt"},
            nodemsg.Stopping("launcher", "", None, 30.0, "ckpt"),
        ),
        (
            {"t": "exit", "code": -15, "stopped": True, "by": "launcher", "reason": None,
             "node": None, "survivors": ["pid 9 (python) in D state"]},
            nodemsg.Exit(-15, True, "launcher", None, None, ("pid 9 (python) in D state",)),
        ),
        ({"t": "error", "msg": "cannot start python3"}, nodemsg.StartError("cannot start python3")),
        ({"t": "trimmed", "bytes": 10, "max": 20}, nodemsg.Trimmed(10, 20, 0)),
        ({"t": "trimmed", "missed": 5, "at": 100}, nodemsg.Trimmed(0, 0, 5, 100)),
        ({"t": "mode", "mode": "detached"}, nodemsg.Mode("detached")),
        (
            {"t": "started", "pid": 7, "ranks": [2], "attempt": 1},
            nodemsg.Started(7, "", None, None, "attached", (2,), 1),
        ),
        (
            {"t": "exit", "code": 1, "attempt": 2},
            nodemsg.Exit(1, False, None, None, None, (), 2),
        ),
        (
            {"t": "exit", "code": 1, "died": {"rank": 3, "code": -9, "at": 12.5}},
            nodemsg.Exit(1, False, None, None, None, (), 0, nodemsg.RankEnd(3, -9, 12.5)),
        ),
        (  # a death's time is the host's time.time(): today's, not capped to 2001
            {"t": "exit", "code": 1, "died": {"rank": 3, "code": 1, "at": 1795000000.25}},
            nodemsg.Exit(1, False, None, None, None, (), 0, nodemsg.RankEnd(3, 1, 1795000000.25)),
        ),
        ({"t": "hub-port", "port": 29400}, nodemsg.HubPort(29400)),
        (
            {"t": "restart", "attempt": 1, "of": 3, "after": "rank 3 failed on node1",
             "node": 1, "delay": 10, "replace": [1]},
            nodemsg.Restart(1, 3, "rank 3 failed on node1", 1, 10.0, (1,)),
        ),
        (
            {"t": "notify", "event": "lost", "status": "waiting", "message": "node1 was lost",
             "wanted": True},
            nodemsg.Notify("lost", "waiting", "node1 was lost", True),
        ),
        (
            {"t": "notify-failed", "event": "failed", "error": "exit 7"},
            nodemsg.NotifyFailed("failed", "exit 7"),
        ),
        ({"t": "hb"}, None),
        ({"t": "something newer"}, None),
    ],
)  # fmt: skip
def test_messages_become_typed_values(msg: dict[str, object], want: object) -> None:
    assert nodemsg.parse(msg) == want


@pytest.mark.parametrize(
    "msg",
    [
        {"t": "started", "pid": "7"},
        {"t": "started", "pid": True},
        {"t": "ranks", "ranks": ["a"]},
        {"t": "ranks"},
        {"t": "exit", "code": 1.5},
        {"t": "mode"},
        {"t": "exit", "code": 1, "attempt": "1"},
        {"t": "restart", "attempt": 1, "of": 2, "delay": -1},
        {"t": "restart", "attempt": 1, "of": 2, "delay": float("nan")},
        {"t": "restart", "attempt": 1},
        {"t": "notify"},
        {"t": "exit", "code": 1, "died": {"rank": "3", "at": 1}},
        {"t": "exit", "code": 1, "died": {"rank": 3}},
        {"t": "hub-port", "port": "29400"},
    ],
)
def test_a_message_that_does_not_hold_is_garbage(msg: dict[str, object]) -> None:
    with pytest.raises(wire.Garbage, match=f"a {msg['t']} message that does not hold"):
        nodemsg.parse(msg)


def test_texts_are_bounded() -> None:
    got = nodemsg.parse({"t": "error", "msg": "x" * 100_000})
    assert isinstance(got, nodemsg.StartError) and len(got.msg) == nodemsg.TEXT_MAX


def test_the_delay_between_attempts_doubles_up_to_five_minutes() -> None:
    assert [protocol.restart_delay(10, k) for k in (1, 2, 3, 6, 20)] == [10, 20, 40, 300, 300]
    assert protocol.restart_delay(0, 4) == 0
    assert protocol.restart_delay(600, 3) == 600  # set above the cap: as set


def test_the_inventorys_notify_events_are_the_hosts() -> None:
    from typing import get_args

    from ddptui.remote import inventory

    assert set(get_args(inventory.NotifyEvent)) == set(protocol.NOTIFY_EVENTS)
    assert inventory.NOTIFY_DEFAULT == protocol.NOTIFY_DEFAULT


def test_the_typed_spec_names_every_key_of_the_spec_and_no_other() -> None:
    """protocol.Spec (read by mypy only: the hosts never import typing) and SPEC_DEFAULTS (what
    the host checks a spec by) are the same keys."""
    tree = ast.parse(inspect.getsource(protocol))
    (spec,) = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "Spec"]
    typed = [ast.unparse(b.target) for b in spec.body if isinstance(b, ast.AnnAssign)]
    assert typed == list(protocol.SPEC_DEFAULTS)


def test_a_launcher_s_word_is_read_as_it_was_said() -> None:
    said = protocol.say(protocol.SAY_STOP, protocol.SAY_STOP_FAILURE, 3)
    assert protocol.heard(said.split()) == (protocol.SAY_STOP, [protocol.SAY_STOP_FAILURE, "3"])
    words = protocol.say(protocol.SAY_NO_SPARE, "no spare host is free").split()
    verb, args = protocol.heard(words)
    assert (verb, " ".join(args)) == (protocol.SAY_NO_SPARE, "no spare host is free")
    assert protocol.heard([]) == ("", [])
