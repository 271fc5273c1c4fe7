"""The fan-out of logins, with fake transports: bounded in flight, dropped logins tried again,
answers (refused keys, a refusal that lasts) reported without waiting."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ddptui.remote import inventory
from ddptui.remote.agents import fanout
from ddptui.remote.agents.transport import HostError, Transport


@pytest.fixture(autouse=True)
def short_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "PAUSE_S", 0.001)
    monkeypatch.setattr(fanout, "MAX_PAUSE_S", 0.005)


def hosts(text: str) -> tuple[inventory.Host, ...]:
    return inventory.parse(f"hosts:\n{text}job: {{script: t.py}}\n", Path("inv.yaml")).hosts


class Fake(Transport):
    """Logs in after `fails` failures of the given kind; counts logins in flight."""

    flying: dict[str, int] = {}
    most: dict[str, int] = {}

    def __init__(self, host: inventory.Host, fails: int = 0, kind: type[BaseException] = OSError):
        super().__init__(host)
        self.fails, self.kind, self.tries = fails, kind, 0

    async def connect(self) -> float:
        self.tries += 1
        for key in ("all", self.host.host):
            Fake.flying[key] = Fake.flying.get(key, 0) + 1
            Fake.most[key] = max(Fake.most.get(key, 0), Fake.flying[key])
        try:
            await asyncio.sleep(0.001)
            if self.tries <= self.fails:
                try:
                    raise self.kind()
                except BaseException:
                    raise HostError(self.host.name, f"failed: {self.kind.__name__}") from None
            return 0.0
        finally:
            for key in ("all", self.host.host):
                Fake.flying[key] -= 1

    async def start(self, argv: list[str]) -> object:  # type: ignore[override]
        raise NotImplementedError

    async def run(self, argv: list[str], input: bytes = b"", timeout: float = 30) -> object:  # type: ignore[override]
        raise NotImplementedError


async def test_logins_in_flight_are_bounded_in_all_and_per_sshd() -> None:
    Fake.flying, Fake.most = {}, {}
    many = hosts('  - host: "10.0.0.[1-200]"\n  - host: one\n    name: "n[1-40]"\n')
    await asyncio.gather(*(fanout.connect(Fake(h)) for h in many))
    assert Fake.most["all"] == fanout.FANOUT
    assert Fake.most["one"] == fanout.PER_SSHD


async def test_a_dropped_login_is_tried_again() -> None:
    t = Fake(hosts("  - host: a\n")[0], fails=5, kind=ConnectionResetError)
    await fanout.connect(t)
    assert t.tries == 6


async def test_a_login_dropped_every_time_ends_unreachable_with_its_reason() -> None:
    t = Fake(hosts("  - host: a\n")[0], fails=99, kind=ConnectionResetError)
    with pytest.raises(HostError, match="ConnectionResetError"):
        await fanout.connect(t)
    assert t.tries == fanout.DROPPED_TRIES


@pytest.mark.parametrize(
    ("kind", "tries"),
    [(ConnectionRefusedError, fanout.REFUSED_TRIES), (PermissionError, 1), (TimeoutError, 1)],
)
async def test_answers_are_reported_soon(kind: type[BaseException], tries: int) -> None:
    t = Fake(hosts("  - host: a\n")[0], fails=99, kind=kind)
    with pytest.raises(HostError, match=kind.__name__):
        await fanout.connect(t)
    assert t.tries == tries


def test_pauses_are_jittered_and_capped() -> None:
    pauses = [fanout.pause(5) for _ in range(50)]
    assert len(set(pauses)) > 1 and max(pauses) <= fanout.MAX_PAUSE_S
