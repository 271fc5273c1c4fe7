"""GPU leases on this machine, for real: flocks held by processes (one SIGKILLed, a dozen racing),
a lease directory with junk and other users' files in it, and the queue over real agents
(local transport), first come first served. The GPUs are the nvidia-smi stand-in's (8 H100s,
GPUs 2 and 5 busy); the lease directory is this session's (tests/conftest.py: lease_dir).
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2etools import supervisors, wait_for
from nvidia_smi import H100_BUSY, install
from probetools import local_inventory, with_gpus
from testhosts import REPO, neighbour, reach

from ddptui.remote.agents import shipper
from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.events import Failure, Notice
from ddptui.remote.host import lease, leasedir, leaseop, standby, state
from ddptui.remote.host.leasedir import LeaseError
from ddptui.remote.leases import take

WANT = {"run_id": "R", "node": 0, "count": 2, "busy": "refuse", "launcher": "me@here"}
HOLD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from ddph import lease, leasedir
want = json.loads(sys.argv[2])
try:
    held = lease.take_now(want)
except leasedir.LeaseError as exc:
    print(json.dumps({"error": str(exc)}), flush=True)
    sys.exit(0)
print(json.dumps({"gpus": held.record["gpus"]}), flush=True)
sys.stdin.read()  # held until told (its stdin closed), or killed
"""


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The stand-in on PATH; the host code importable as `ddph` (as shipped) from the path
    returned, by any user."""
    with_gpus(monkeypatch, tmp_path, H100_BUSY)
    code = tmp_path / "code"
    code.mkdir()
    (code / "ddph").symlink_to(REPO / "remote" / "host")
    return code


def holder(
    code: Path, want: dict[str, object], user: list[str] | None = None
) -> subprocess.Popen[str]:
    python = sys.executable if user is None else "/usr/bin/python3"
    argv = [*(user or []), python, "-c", HOLD, str(code), json.dumps(want)]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def said(proc: subprocess.Popen[str]) -> dict[str, object]:
    assert proc.stdout is not None
    return dict(json.loads(proc.stdout.readline()))


def test_a_killed_holders_gpus_are_taken_and_named(gpus: Path) -> None:
    first = holder(gpus, WANT)
    assert said(first) == {"gpus": [0, 1]}
    with pytest.raises(LeaseError, match="GPU 0,1 held by root's run R"):
        lease.take_now(dict(WANT, run_id="S", count=5))  # 8 less 2 held, 2 busy: 4 left
    first.send_signal(signal.SIGKILL)
    first.wait()
    taken = lease.take_now(dict(WANT, run_id="S", count=6, busy="share"))
    assert taken is not None and taken.record["gpus"] == [0, 1, 2, 3, 4, 5]
    assert {r["run_id"] for r in taken.dead} == {"R"}  # its record was left: it died
    taken.give_back()
    view = leaseop.view()
    assert [g["holder"] for g in view["gpus"]] == [None] * 8
    assert [g["dead"] for g in view["gpus"]] == [None] * 8  # given back: no dead run's


def test_a_dead_runs_leftovers_of_its_node_are_killed_by_the_next_take(gpus: Path) -> None:
    """Its supervisor killed, a process of its node left (one that escaped the kernel's kill):
    the next take KILLs it, by the run's tags, and no other node's."""
    first = holder(gpus, WANT)
    assert said(first) == {"gpus": [0, 1]}
    tagged = lambda node: subprocess.Popen(  # noqa: E731
        ["sleep", "60"], env={**os.environ, "DDPTUI_RUN_ID": "R", "DDPTUI_NODE": node}
    )
    left, elsewhere = tagged("0"), tagged("1")
    first.send_signal(signal.SIGKILL)
    first.wait()
    try:
        found = lease.read_gpus()
        assert found is not None
        dir_fd = leasedir.open_dir()
        try:
            states = lease.look(dir_fd, *found)
        finally:
            os.close(dir_fd)
        assert lease.sweep_dead(states, [g.uuid for g in found[0]]) == {"R": 1}
        assert left.wait(5) == -signal.SIGKILL
        assert elsewhere.poll() is None  # another node's: not on these GPUs
    finally:
        for p in (left, elsewhere):
            p.kill()
            p.wait()


def test_many_launches_at_once_never_share_a_gpu(gpus: Path) -> None:
    want = dict(WANT, busy="share")
    racing = [holder(gpus, dict(want, run_id=f"R{i}")) for i in range(12)]
    answers = [said(p) for p in racing]
    taken = [a["gpus"] for a in answers if "gpus" in a]
    assert len(taken) == 4  # 8 GPUs, 2 each
    assert sorted(g for t in taken for g in t) == list(range(8))  # every one once
    assert all("its GPUs are taken" in str(a["error"]) for a in answers if "error" in a)
    for p in racing:
        p.communicate("")


def test_junk_in_the_lease_dir_is_passed_over_and_a_planted_symlink_never_followed(
    gpus: Path, lease_dir: Path, victim: Path
) -> None:
    (lease_dir / "notes.txt").write_text("hello")
    (lease_dir / "GPU-garbage").write_text("\x00\xff not json")
    (lease_dir / "queue-000000000001-x-n0").write_text("{not json")
    gpu0 = leaseop.view()["gpus"][0]["uuid"]
    (lease_dir / gpu0).symlink_to(victim)
    with pytest.raises(LeaseError, match=f"{gpu0}: a symlink \\(not followed\\)"):
        lease.take_now(WANT)
    assert victim.read_text() == "precious\n"
    (lease_dir / gpu0).unlink()
    (lease_dir / gpu0).mkdir()
    with pytest.raises(LeaseError, match=f"{gpu0}: .*Is a directory"):
        lease.take_now(WANT)
    (lease_dir / gpu0).rmdir()
    (lease_dir / gpu0).write_text("{}")  # a record that says nothing: free, no one named
    held = lease.take_now(WANT)
    assert held is not None and held.record["gpus"] == [0, 1] and held.dead == []
    held.give_back()


def test_another_users_files_are_named_never_used(
    monkeypatch: pytest.MonkeyPatch, shared: Path
) -> None:
    user = neighbour()
    reach(user, [str(REPO), "/usr/bin/python3"])
    as_neighbour = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                    "--clear-groups", "--"]  # fmt: skip
    dir_ = shared / "leases"
    monkeypatch.setenv("DDPTUI_LEASE_DIR", str(dir_))
    gpu0 = leaseop.view()["gpus"][0]["uuid"]  # made it, shared
    (dir_ / gpu0).write_text("")
    (dir_ / gpu0).chmod(0o644)  # root's, not shared: the neighbour cannot take it
    answer = said(holder(shared / "code", WANT, as_neighbour))
    assert f"{gpu0}: Permission denied (root's, mode 0644): its owner or root" in str(answer)
    (dir_ / gpu0).chmod(0o666)
    dir_.chmod(0o755)  # a lease directory not every user may add files to
    answer = said(holder(shared / "code", WANT, as_neighbour))
    assert f"the lease directory {dir_} is root's, mode 0755: every user" in str(answer)


def test_a_lease_file_that_cannot_be_written_is_said_and_nothing_is_held(
    gpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full /dev/shm: the take says which file and why, and holds nothing after (no flock,
    no record), nor does a queued launch's ticket stay."""

    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as m:
        m.setattr(os, "pwrite", full)
        with pytest.raises(LeaseError, match="GPU 0's lease file cannot be written: No space"):
            lease.take_now(WANT)
        dir_fd = leasedir.open_dir()
        try:
            with pytest.raises(LeaseError, match="its queue ticket cannot be written: No space"):
                leasedir.new_ticket(dir_fd, 1, "R", 0, {"run_id": "R"})
            assert not leasedir.tickets(dir_fd)
        finally:
            os.close(dir_fd)
    view = leaseop.view()
    assert [(g["holder"], g["dead"]) for g in view["gpus"]] == [(None, None)] * 8
    assert not view["queue"]
    taken = lease.take_now(WANT)  # free to take
    assert taken is not None and taken.record["gpus"] == [0, 1]
    taken.give_back()


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The stand-in and the host code where any user reaches them (not pytest's 0700 tree)."""
    path = Path(tempfile.mkdtemp(prefix="ddptui-leases-"))
    path.chmod(0o755)
    install(path / "bin", H100_BUSY)
    monkeypatch.setenv("PATH", f"{path / 'bin'}:{os.environ['PATH']}")
    (path / "code").mkdir()
    (path / "code" / "ddph").symlink_to(REPO / "remote" / "host")
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_the_queue_is_first_come_first_served(gpus: Path, tmp_path: Path) -> None:
    inv = local_inventory(tmp_path)
    hogging = lease.take_now(dict(WANT, run_id="hog", count=8, busy="share"))
    assert hogging is not None
    said: list[str] = []

    async def queue() -> None:
        fleets = [Fleet(inv.hosts[:1]) for _ in range(2)]
        tell = lambda e: said.append(e.text) if isinstance(e, Notice) else None  # noqa: E731
        leases = [take.Leases(f, tell, list[Failure]()) for f in fleets]
        ask = [[(0, take.want(r, inv.hosts[0], 6, inv.job))] for r in ("A", "B")]
        first = asyncio.ensure_future(leases[0].take(ask[0], wait=float("inf")))
        await _until(lambda: any("waiting for GPUs, 1st in line" in s for s in said))
        second = asyncio.ensure_future(leases[1].take(ask[1], wait=float("inf")))
        await _until(lambda: any("2nd in line" in s and "root's run A" in s for s in said))
        hogging.give_back()
        assert await first
        assert leases[0].held[0].gpus == (0, 1, 3, 4, 6, 7)  # the free ones; 2, 5 are busy
        assert not second.done()
        leases[0].close()  # its start never came: given back, B's turn
        assert await second
        for lz, f in zip(leases, fleets, strict=True):
            lz.close()
            await f.close()

    asyncio.run(asyncio.wait_for(queue(), 120))


def test_many_launches_at_once_each_get_gpus_nobody_else_holds(gpus: Path, tmp_path: Path) -> None:
    """The issue's race: 8 launches in the same instant, each with its own agent (as 8
    launchers have), each wanting 2 GPUs of the 6 free ones (2 and 5 are busy), all with
    --wait. Each gets GPUs no other launch holds meanwhile, the busy ones never, and all of
    them in turn: the first takes race over the host's lock, the rest go through the queue."""
    inv = local_inventory(tmp_path)
    holding: dict[str, set[int]] = {}  # launch → its GPUs, from its take until it lets go
    taken: list[set[int]] = []
    answered: set[str] = set()  # launches holding or queued: the first answers all came

    async def launch(name: str, fleet: Fleet, everyone: asyncio.Event) -> None:
        def answer() -> None:
            answered.add(name)
            if len(answered) == 8:
                everyone.set()

        def tell(event: object) -> None:
            if isinstance(event, Notice) and "waiting for GPUs" in event.text:
                answer()

        leases = take.Leases(fleet, tell, list[Failure]())
        assert await leases.take([(0, take.want(name, inv.hosts[0], 2, inv.job))], wait=60)
        mine = set(leases.held[0].gpus)
        assert not any(mine & theirs for theirs in holding.values()), (name, mine, holding)
        holding[name] = mine
        taken.append(mine)
        answer()
        await everyone.wait()  # the first takes' holders hold until every launch has asked
        del holding[name]
        leases.close()

    async def race() -> None:
        fleets = [Fleet(inv.hosts[:1]) for _ in range(8)]
        everyone = asyncio.Event()
        try:
            await asyncio.gather(*(launch(f"L{i}", f, everyone) for i, f in enumerate(fleets)))
        finally:
            for f in fleets:
                await f.close()

    asyncio.run(asyncio.wait_for(race(), 120))
    assert len(taken) == 8 and all(len(t) == 2 for t in taken)
    assert not set().union(*taken) & {2, 5}  # busy: never taken (busy_gpus: refuse)


def test_a_host_cut_while_another_holds_its_part_leaves_nothing_held(
    gpus: Path, tmp_path: Path
) -> None:
    """node0 has taken its GPUs when node1 falls silent (its agent stopped: a cut host): after
    the silence allowed, the launch is refused naming node1, and node0 gives its GPUs back."""
    inv = local_inventory(tmp_path)
    failures: list[Failure] = []

    async def launch() -> take.Leases:
        fleet = Fleet(inv.hosts)
        leases = take.Leases(fleet, lambda e: None, failures, silence=2.0)
        cut = (await fleet.agent(1, lambda e: None)).hello
        assert cut is not None
        os.kill(cut.pid, signal.SIGSTOP)
        try:
            asked = [(k, take.want("R", inv.hosts[k], 2, inv.job)) for k in (0, 1)]
            assert not await leases.take(asked)
        finally:
            os.kill(cut.pid, signal.SIGCONT)
            leases.close()
            await fleet.close()
        return leases

    leases = asyncio.run(asyncio.wait_for(launch(), 60))
    assert leases.nodes[0].last.kind == "held"  # it held its part when node1 was cut
    assert failures[0].message.startswith("cannot lease the GPUs: node1: not heard from for")
    free = lambda: [g["holder"] for g in leaseop.view()["gpus"]] == [None] * 8  # noqa: E731
    wait_for(free, 10, "node0's GPUs given back")


async def _until(cond: object, timeout: float = 60) -> None:
    async def poll() -> None:
        while not cond():  # type: ignore[operator]
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), timeout)


def test_a_spare_whose_gpus_are_held_is_passed_over_saying_why(
    gpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hot spare's standby takes its node as a launcher would (standby.become): its
    supervisor takes its own lease first; held elsewhere, it does not start, and says why (the
    hub passes it over with these words, remote/host/hub.py)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    code = state.install_code(shipper.digest(), shipper.sources())
    other = lease.take_now(dict(WANT, run_id="other", count=6, busy="share"))
    assert other is not None
    spec = {"run_id": "spare-run", "node": 1, "names": ["node0", "node2"], "secret": "s",
            "argv": [sys.executable, "-c", "print('ran')"], "restarts": 1,
            "lease": dict(WANT, run_id="spare-run", node=1, count=4)}  # fmt: skip
    why = standby.become(spec, 1, 1, code)
    assert why == (
        "cannot start the job: its GPUs are taken: GPU 0,1,2,3,4,5 held by root's run other"
    )
    wait_for(lambda: not supervisors("spare-run"), 10, "its supervisor to leave")  # nothing runs
    other.give_back()
