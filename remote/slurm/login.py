"""The Slurm login node: one SSH login for the whole run, its agent (remote/agents/agent.py)
shared by every Slurm command and by the relay to every node (remote/slurm/transport.py).

Sites block accounts that open many logins: a followed run logs in once, and again only if
that connection drops. Slurm's commands run there (remote/host/slurmcmd.py), their words
passed on as Slurm's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ddptui.remote.agents import openssh, ops
from ddptui.remote.agents.agent import Agent
from ddptui.remote.agents.fleet import Fleet, for_host
from ddptui.remote.agents.sshclient import ClientTransport
from ddptui.remote.agents.transport import HostError, Transport
from ddptui.remote.events import Event, HostState, Notice
from ddptui.remote.host.protocol import SLURM_RUN_DIR
from ddptui.remote.inventory import Host
from ddptui.remote.slurm import queue

Emit = Callable[[Event], None]
OUTPUT = "slurm-%j.out"  # the job's own output file, in the run's directory on the login node


def _transport(host: Host) -> Transport:
    """OpenSSH's client where there is one: the whole run rides its one login, and the
    submission does not wait for asyncssh to load (remote/agents/sshclient.py)."""
    if host.transport == "local" or openssh.client() is None:
        return for_host(host)
    return ClientTransport(host)


class SlurmError(HostError):
    """Slurm refused or failed, in its own words (sbatch's `error: ...`)."""


class Login:
    def __init__(
        self, host: Host, emit: Emit, *, lease: float = 60.0, start_timeout: float = 300.0
    ) -> None:
        self.host, self.emit = host, emit
        self.fleet = Fleet(
            [host], lease=lease, start_timeout=start_timeout, prefork=False,
            transports=[_transport(host)],
        )  # fmt: skip
        self.logins = 0  # how many times this run logged in (sites count them)

    @property
    def name(self) -> str:
        return self.host.name

    async def agent(self) -> Agent:
        """The login node's agent: logged into once, again only if the connection dropped.
        Raises HostError."""
        return await self.fleet.agent(0, self._said)

    def _said(self, event: Event) -> None:
        """The login's own progress: a line once logged in, not a host of the run's."""
        if isinstance(event, HostState) and event.state == "connected":
            self.logins += 1
            again = " again" if self.logins > 1 else ""
            text = f"logged into {self.name}{again} ({event.detail}): Slurm's commands and every "
            self.emit(Notice("info", text + "node of the job go through this one login"))

    async def command(
        self, argv: Sequence[str], *, input: str = "", prepare: str = "", read: str = "",
        test: Sequence[str] = (),
    ) -> ops.SlurmReply:  # fmt: skip
        agent = await self.agent()
        return await ops.slurm(agent, argv, input=input, prepare=prepare, read=read, test=test)

    async def submit(self, script: str, run_id: str) -> tuple[str, str]:
        """The job's id and Slurm's estimate (`Job 3 to start at ... on nodes ...`), in one
        round trip: `sbatch --test-only` first (a request Slurm can never satisfy is refused
        before anything is queued), then sbatch; SlurmError in Slurm's words if it refuses.
        The job's output goes to the run's directory on the login node, made first: Slurm
        needs it to exist at submit."""
        argv = ["sbatch", "--parsable", f"--output={SLURM_RUN_DIR}/{OUTPUT}"]
        test = ["sbatch", "--test-only"]
        reply = await self.command(argv, input=script, prepare=run_id, test=test)
        tested = reply._replace(code=reply.test_code, err=reply.test_err)
        estimate = self._words(tested, "sbatch --test-only")
        self._words(reply, "sbatch")
        return reply.out.strip().split(";")[0], estimate

    def _words(self, reply: ops.SlurmReply, what: str) -> str:
        said = " ".join(line.strip() for line in reply.err.splitlines() if line.strip())
        said = said.removeprefix("sbatch: ").replace(" sbatch: ", " ")
        if reply.code != 0:
            raise SlurmError(self.name, f"{what}: {said or f'exit {reply.code}'}")
        return said

    async def job(self, job_id: str) -> queue.Job | None:
        """What Slurm says of the job: squeue while it knows it, else sacct; None when neither
        does (purged, and no accounting)."""
        reply = await self.command(
            ["squeue", "-h", "--states=all", "-j", job_id, "-o", queue.SQUEUE_FORMAT]
        )
        found = queue.parse_squeue(reply.out) if reply.code == 0 else None
        if found is not None:
            return found
        reply = await self.command(
            ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", queue.SACCT_FIELDS]
        )
        return queue.parse_sacct(reply.out) if reply.code == 0 else None

    async def down(self, nodes: Sequence[str]) -> list[str]:
        """Those of these nodes Slurm holds down, drained or failed (a node failure's)."""
        argv = ["sinfo", "-h", "-N", "-n", ",".join(nodes), "-t", "down,drain,fail", "-o", "%N"]
        reply = await self.command(argv)
        found = reply.out.split() if reply.code == 0 else []
        return [n for n in nodes if n in found]

    async def cancel(self, job_id: str, name: str) -> str | None:
        """scancel, of the job by that id only while it has that name (an id counted again
        names somebody else's job); why it failed, or None."""
        reply = await self.command(["scancel", f"--name={name}", job_id])
        return None if reply.code == 0 else (reply.err.strip() or f"exit {reply.code}")

    async def output(self, run_id: str, job_id: str) -> str:
        """The end of the job's own output file (where a node's boot says why it failed)."""
        reply = await self.command([], read=f"{run_id}/{OUTPUT.replace('%j', job_id)}")
        return reply.output

    def drop(self) -> None:
        """Give the login up at once, without a goodbye (its link is silent)."""
        agent = self.fleet.agents.get(0)
        if agent is not None:
            agent.drop()
        self.fleet.transports[0].drop()

    async def close(self) -> None:
        await self.fleet.close()
