"""A hang node 0's watch kept, copied into the local run directory: the host's answer
(remote/host/watch.py: kept) and the launcher's copy (remote/stalls/kept.py), what the host sends
taken as data."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ddptui.remote.agents.transport import HostError
from ddptui.remote.events import Event, Notice
from ddptui.remote.host import protocol, state, watch
from ddptui.remote.stalls import kept


def test_node_0_answers_the_hangs_it_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert watch.kept({"run_id": "r1", "since": 0}) == {"records": {}}  # no node dir yet
    where = Path(state.node_dir("r1", 0))
    where.mkdir(parents=True)
    (where / "hang-0.json").write_text('{"culprits": [3]}')
    (where / "hang-1.json.tmp").write_text("{")  # a keep() under way
    (where / "events.jsonl").write_text("{}")
    assert watch.kept({"run_id": "r1"}) == {"records": {"hang-0.json": '{"culprits": [3]}'}}


@dataclass
class Host:
    name: str = "node0"
    since: int = 0


class Agent:
    def __init__(self, answer: Any) -> None:
        self.answer, self.asked = answer, []

    async def request(self, op: str, args: dict[str, Any]) -> Any:
        self.asked.append((op, args))
        if isinstance(self.answer, HostError):
            raise self.answer
        return self.answer


class Fleet:
    def __init__(self, answer: Any) -> None:
        self.hosts = (Host(),)
        self.the_agent = Agent(answer)

    async def agent(self, k: int, emit: Any) -> Agent:
        return self.the_agent


def fetch(answer: Any, run_dir: Path) -> list[Event]:
    said: list[Event] = []
    fleet: Any = Fleet(answer)
    asyncio.run(kept.fetch(fleet, said.append, "r1", run_dir))
    assert fleet.the_agent.asked == [(protocol.HANGS, {"run_id": "r1", "since": 0})]
    return said


def test_the_launcher_copies_each_new_kept_hang_and_names_its_path(tmp_path: Path) -> None:
    (tmp_path / "hang-0.json").write_text('{"old": 1}')  # copied before: kept as it is
    records = {
        "hang-0.json": '{"new": 1}',
        "hang-1.json": json.dumps({"culprits": [3]}),
        "hang-2.json": "{not json",
        "../hang-3.json": "{}",
        "summary.json": "{}",
    }
    said = fetch({"records": records}, tmp_path)
    assert said == [
        Notice("info", f"the hang's stacks and verdict, copied here: {tmp_path}/hang-1.json")
    ]
    assert json.loads((tmp_path / "hang-1.json").read_text()) == {"culprits": [3]}
    assert (tmp_path / "hang-0.json").read_text() == '{"old": 1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hang-0.json", "hang-1.json"]
    assert (tmp_path / "hang-1.json").stat().st_mode & 0o077 == 0


def test_nothing_kept_or_node_0_unreachable(tmp_path: Path) -> None:
    assert fetch({"records": "junk"}, tmp_path) == []
    [notice] = fetch(HostError("node0", "connection refused"), tmp_path)
    assert isinstance(notice, Notice) and notice.level == "warning" and notice.host == "node0"
    assert "connection refused" in notice.text
    assert list(tmp_path.iterdir()) == []
