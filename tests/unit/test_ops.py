"""remote/agents/ops.py: what a host answers is data: typed once, a wrong shape names the host."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ddptui.remote.agents import ops
from ddptui.remote.agents.transport import HostError


class FakeAgent:
    """Answers every op with `answer`."""

    name = "node7"

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def request(self, op: str, args: Any = None, **_: Any) -> Any:
        return self.answer


def ask(op: Any, answer: Any, *args: Any, **kw: Any) -> Any:
    return asyncio.run(op(FakeAgent(answer), *args, **kw))


def test_status_is_typed_once() -> None:
    answer = {"runs": {"r1": {"0": {"alive": True}, "1": None}}}
    assert ask(ops.status, answer, [("r1", 0, 0), ("r1", 1, 0)]) == {
        "r1": {0: {"alive": True}, 1: None}
    }


@pytest.mark.parametrize(
    ("op", "answer", "args"),
    [
        (ops.status, {"runs": ["r1"]}, ([("r1", 0, 0)],)),
        (ops.status, {"runs": {"r1": {"zero": {}}}}, ([("r1", 0, 0)],)),
        (ops.status, {"runs": {"r1": {"0": "alive"}}}, ([("r1", 0, 0)],)),
        (ops.sweep, {"survivors": "pid 3"}, ("r1", 0, 5.0)),
        (ops.sync_plan, {"need": {"a.py": 1}}, ("/w", b"{}", 5.0)),
        (ops.stacks, {"ranks": {"0": "no"}}, ({}, 5.0)),
        (ops.stacks, {"ranks": {"0": {"threads": [{"main": True, "frames": 3}]}}}, ({}, 5.0)),
        (ops.stacks, {"flight": ["trace"]}, ({}, 5.0)),
    ],
)
def test_a_wrong_shape_names_the_host(op: Any, answer: Any, args: tuple[Any, ...]) -> None:
    with pytest.raises(ops.ReplyError) as caught:
        ask(op, answer, *args)
    assert isinstance(caught.value, HostError)
    assert caught.value.host == "node7"
    assert "not understood" in caught.value.reason


def test_stacks_typed() -> None:
    frame = {"function": "f", "file": "a.py", "line": 3, "path": "/w/a.py"}
    answer = {
        "problem": "",
        "ranks": {"2": {"pid": 9, "threads": [{"frames": []}, {"main": True, "frames": [frame]}]}},
        "flight": {"2": {"trace": {"entries": []}}, "3": {"error": "no pipe"}},
    }
    got = ask(ops.stacks, answer, {}, 5.0)
    assert got.ranks == {2: ops.RankDump(9, (("f", "a.py", 3, "/w/a.py"),), None)}
    assert got.flight == {
        2: ops.FlightDump({"entries": []}, None),
        3: ops.FlightDump(None, "no pipe"),
    }


def test_port_count_and_sweep() -> None:
    assert ask(ops.port, {"port": 29500}) == 29500
    assert ask(ops.port, {"port": "29500"}) is None
    listed = {"list": {"code": 0, "out": "GPU 0: H100"}, "cuda_visible_devices": "0"}
    assert ask(ops.count, listed, 5.0) == ops.Count("GPU 0: H100", "0")
    assert ask(ops.count, {"list": {"code": 9}}, 5.0) == ops.Count(None, None)
    assert ask(ops.sweep, {"survivors": ["pid 3"]}, "r1", 0, 5.0) == ["pid 3"]
