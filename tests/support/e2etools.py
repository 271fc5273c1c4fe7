"""What the end-to-end tests share: the CLI as a user runs it, waiting, and "nothing left"."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from testhosts import REPO, TestCluster, veth_name

from ddptui.remote.host import nodes, procs, spool, standby

T = TypeVar("T")


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := cond():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Cmd:
    """`ddptui --headless ARGS` as a user runs it, its output captured to BASE.out/.err."""

    def __init__(self, args: Sequence[str], base: Path, env: dict[str, str] | None = None) -> None:
        self.out, self.err = base.with_suffix(".out"), base.with_suffix(".err")
        argv = [sys.executable, "-m", "ddptui.tui.cli", "--headless", *args]
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=err, cwd=REPO, env={**os.environ, **(env or {})}
            )

    def wait(self, timeout: float = 180) -> int:
        return self.proc.wait(timeout)

    @property
    def stdout(self) -> str:
        return self.out.read_text()

    @property
    def stderr(self) -> str:
        return self.err.read_text()


class Cli(Cmd):
    """`ddptui --headless launch` as a user runs it, output captured to files."""

    def __init__(
        self,
        inv: Path,
        run_dir: Path,
        *extra: str,
        flags: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.run_dir = run_dir
        args = ["launch", "-i", str(inv), "--run-dir", str(run_dir), *flags]
        super().__init__([*args, "--", *extra] if extra else args, run_dir, env)

    def run_id(self) -> str:
        def registered() -> str | None:
            try:
                return str(json.loads((self.run_dir / "run.json").read_text())["run_id"])
            except (OSError, ValueError, KeyError):
                return None

        return str(wait_for(registered, 30, "the run to start"))

    def events(self) -> list[str]:
        return (self.run_dir / "events.jsonl").read_text().splitlines()

    def summary(self) -> dict[str, Any]:
        return dict(json.loads((self.run_dir / "summary.json").read_text()))

    def wait_ranks(self, world: int, timeout: float = 120) -> None:
        """Until every rank has printed its greeting (the job is really running)."""

        def started() -> bool:
            for r in range(world):
                log = self.run_dir / f"rank-{r}.log"
                if not log.exists() or f"rank {r}/{world}" not in log.read_text():
                    return False
            return True

        wait_for(started, timeout, f"{world} ranks to start")


def supervisors(run_id: str) -> list[int]:
    """The run's supervisors (and their guardians) on any host: their command line is the
    supervisor's boot (nodes.DAEMON_BOOT) with the run's id."""
    return [p for p in procs.all_pids() if run_id in cmdline(p) and nodes.DAEMON_BOOT in cmdline(p)]


def standbys(run_id: str) -> list[int]:
    """The run's hot spares' standbys on any host (remote/host/standby.py's boot)."""
    return [p for p in procs.all_pids() if run_id in cmdline(p) and standby.BOOT in cmdline(p)]


def node_file(cluster: TestCluster, host: int, run_id: str, node: str, name: str) -> Path:
    """A file of a node's directory on a test host (node: `n0`, a spare's `n1-a1`)."""
    return cluster.hosts[host].home / ".local/state/ddptui/runs" / run_id / node / name


def assert_node1_ran_on_the_spare(cluster: TestCluster, run_id: str) -> None:
    """The run, detached, succeeded (node 0's state says so) with node 1's ranks on node2 from
    attempt 2: a hot spare's standby took node 1 with nobody attached."""
    hub = node_file(cluster, 0, run_id, "n0", "state.json")
    status = lambda: json.loads(hub.read_text()).get("run_status")  # noqa: E731
    wait_for(lambda: status() is not None, 180, "the run to end")
    assert status() == "succeeded"
    spare = node_file(cluster, 2, run_id, "n1-a1", "state.json").parent
    kept = b"".join(p.read_bytes() for p in spare.glob(f"{spool.PREFIX}*"))
    assert b"rank 2/4 on node2 (node 1" in kept and b"rank 3/4 on node2 (node 1" in kept


@contextlib.contextmanager
def cut_off(cluster: TestCluster, host: int) -> Iterator[None]:
    """The host's link down (veth down: its sshd and supervisor see nothing), up again after."""
    veth = veth_name(cluster.prefix, host)
    subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    try:
        yield
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], check=True)


def ssh_home(config: Path, home: Path) -> dict[str, str]:
    """The environment of a user whose ~/.ssh/config is `config` (a cluster's ssh_config)."""
    (home / ".ssh").mkdir(parents=True)
    shutil.copyfile(config, home / ".ssh" / "config")
    return {"HOME": str(home)}


def assert_nothing_left(cluster: TestCluster, run_id: str, timeout: float = 20) -> float:
    """Every process of the run is gone (on every host); returns how long that took."""
    t0 = time.monotonic()
    wait_for(
        lambda: not cluster.pids_with_env("DDPTUI_RUN_ID", run_id),
        timeout,
        f"processes of run {run_id} to end",
    )
    return time.monotonic() - t0


def ns_pids(netns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def children(pid: int) -> list[int]:
    """The processes pid started that still run (Linux)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


async def dropped_once(cluster: TestCluster, i: int, login: Awaitable[T]) -> T:
    """`login` to host i while its sshd drops it: with MaxStartups 1:100:2 (the caller's), a
    connection left unauthenticated makes sshd drop every new one; it goes once sshd has
    logged a drop, and the login tried again gets in."""
    log = cluster.hosts[i].log_file
    drops_before = log.read_text(errors="replace").count("past MaxStartups")
    hog = socket.create_connection((cluster.hosts[i].addr, 22))
    trying = asyncio.ensure_future(login)
    while log.read_text(errors="replace").count("past MaxStartups") == drops_before:
        await asyncio.sleep(0.05)  # sshd logs each drop: the login was dropped once
    hog.close()
    return await trying
