"""A host is lost: judged here, and only here, on the launcher.

A node's stream (remote/run/gang.py) or a lease's channel (remote/leases/take.py) is given up on
once its host has said nothing for the lease (job.link_timeout), counted from the launcher's own
wake if it was not running itself (a laptop's lid closed, a SIGSTOP: the hosts were not silent,
it was). What a stream that ended without its supervisor's word means for its node is said here
too: lost, its allocation ended under it (Slurm's word), its connection's own reason, or its
supervisor dead. The hosts judge their own side: a supervisor, the launcher's silence; node 0's
hub, its peers'.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddptui.remote.agents.link import NodeLink
from ddptui.remote.host import protocol

AWAY_BEATS = 3  # the launcher's own clock jumped by this many beats: it was not running


@dataclass
class Silence:
    """The run's lease, as the launcher keeps it."""

    timeout: float  # job.link_timeout
    away: float = 0.0  # seconds the launcher itself was not running
    woke: float = 0.0  # when it ran again (monotonic): no silence before counts against a host
    ended_by: str | None = None  # the nodes' allocation ended under the run (Slurm's word)

    @property
    def beat(self) -> float:
        """How often each supervisor is pinged."""
        return protocol.beat_interval(self.timeout)

    def slept(self, last: float, now: float) -> str | None:
        """The notice to give if the launcher's clock jumped since `last` (the hosts heard
        nothing meanwhile): every host is judged afresh, once what it said meanwhile is read."""
        if now - last <= AWAY_BEATS * self.beat + 1.0:
            return None
        self.away = max(self.away, now - last)
        self.woke = now
        return (
            f"ddptui itself was not running for {self.away:.0f} s (asleep or stopped): the "
            "hosts are judged once what they said meanwhile is read"
        )

    def silent(self, heard: float, now: float) -> bool:
        """A host last `heard` then (monotonic) is not heard from for the lease, counted from
        the launcher's wake if it slept."""
        return now - max(heard, self.woke) > self.timeout

    @property
    def reconnecting(self) -> str:
        return (
            "connection lost; reconnecting (the job runs on; the host counts as lost after "
            f"{self.timeout:g} s without a word)"
        )

    def gone(self, link: NodeLink, why: str, has_word: bool) -> str:
        """Why a node's stream ended (`why`: its connection's reason, "" if by the host) when
        its supervisor's last word (`has_word`) is missing or is read against this."""
        dead = not has_word and link.ended and not link.lost
        if self.ended_by and not has_word:
            return self.ended_by
        if link.lost or not (dead or why):
            return (
                f"lost: not heard from for {self.timeout:g} s (network cut or host down); "
                "its supervisor stops its part when no launcher is heard from for as long"
            )
        if why and not has_word:
            return why
        return "its supervisor died (the host's part is swept by the run's tags)"

    def reason(self, lease: str) -> str:
        """Why a run ended lost: the launcher's own absence, if it was away past the lease;
        else what the hosts said (`lease`)."""
        if self.away:
            return (
                f"ddptui itself was not running for {self.away:.0f} s (asleep or stopped), "
                f"past the {self.timeout:g} s lease: the hosts ended the run"
            )
        return lease
