"""NCCL's flight recorder, on demand, with nothing of a host's ever unpickled here.

With `nccl.flight_recorder: true` every rank keeps a ring of its last collectives
(TORCH_NCCL_TRACE_BUFFER_SIZE; TORCH_FR_BUFFER_SIZE in newer torch), dumps it when NCCL times
out (TORCH_NCCL_DUMP_ON_TIMEOUT) and, once its process group exists, reads a pipe of its own
(`<TORCH_NCCL_DEBUG_INFO_PIPE_FILE><rank>.pipe`): a byte there dumps the ring to
`<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>`. The files live in the node's private scratch directory
on its host. A stacks dump pokes every pipe; each host reads its own ranks' traces (a pickle:
read there by an unpickler that refuses any class or function, remote/host/stacks.py) and sends
them as JSON. They are saved in the run directory as JSON, and node 0's host runs torch's
analyser on them with its own python, in its private directory: the verdict comes back as text
and names the ranks that missed a collective.

A host answers for its own ranks only: a rank two hosts send is taken from neither, and both
are named (one would have replaced the other's trace, and so the verdict). What is kept is
bounded as node 0's gathering is (remote/host/hangtraces.py: UNPACKED_MAX), the ranks in order,
the rest named.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddptui.remote import fold
from ddptui.remote.host.flightfiles import PIPE, PIPE_VAR, TRACE, VERDICT
from ddptui.remote.host.hangtraces import LEFT_OUT, UNPACKED_MAX, clean
from ddptui.remote.store.record import private_dir, write_private

BUFFER = 2000  # collectives each rank remembers
VERDICT_LINES = 12  # of the analyser's output, on the console and in the dashboard

# A host's word on one of its ranks: (the host, its trace or why none: ops.FlightDump).
Sent = tuple[str, Any]
# The traces as JSON ({rank: trace}) → the analyser's verdict, from a host.
Analyse = Callable[[bytes], Awaitable[str]]


# Old name → new. A torch reads the new one first; from 2.11 (seen there on an H200, and in
# 2.13) every rank also prints a deprecation warning for each old name that is set.
RENAMED = {
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "TORCH_FR_BUFFER_SIZE",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "TORCH_FR_DUMP_TEMP_FILE",
}
NEW_NAMES_ONLY = (2, 11)


def env(scratch: str, own: Collection[str] = ()) -> dict[str, str]:
    """The variables that turn the flight recorder on for every rank of a node. own: the names
    the inventory sets itself: where it sets either name of a pair, ddptui sets neither."""
    trace = f"{scratch}/{TRACE}"
    recorder = {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": str(BUFFER),
        "TORCH_FR_BUFFER_SIZE": str(BUFFER),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": trace,
        "TORCH_FR_DUMP_TEMP_FILE": trace,
        PIPE_VAR: f"{scratch}/{PIPE}",
    }
    theirs = {name for pair in RENAMED.items() if set(pair) & set(own) for name in pair}
    return {k: v for k, v in recorder.items() if k not in theirs}


def job_torch(facts: Mapping[str, Any]) -> str | None:
    """The torch version the job's ranks will import, from a host's checked facts: the
    image's (its dry run) where the job runs in a container."""
    box = facts.get("container")
    return (box.get("dry_run") or {}).get("torch") if box else facts.get("torch")


def for_torch(env: Mapping[str, str], version: str | None) -> dict[str, str]:
    """A node's env without the old names its torch (as the checks found it) would warn of:
    only where the new name says the same. Unknown (no checks): both, as older torch needs."""
    found = re.match(r"(\d+)\.(\d+)", version or "")
    if not found or (int(found[1]), int(found[2])) < NEW_NAMES_ONLY:
        return dict(env)
    return {k: v for k, v in env.items() if k not in RENAMED or env.get(RENAMED[k]) != v}


def collect(sent: Mapping[int, list[Sent]]) -> Collected:
    """The traces hosts sent ({rank: [(host, dump)]}): each rank's from the one host that sent
    it, at most UNPACKED_MAX bytes of them in all."""
    found: dict[int, Any] = {}
    missing: dict[int, str] = {}
    room = UNPACKED_MAX
    for rank in sorted(sent):
        hosts = [host for host, _ in sent[rank]]
        got = sent[rank][0][1]
        if len(hosts) > 1:
            missing[rank] = f"refused: {fold.hosts(hosts)} each sent one (a host sends its own)"
        elif got.error is not None:
            missing[rank] = got.error
        elif (size := len(json.dumps(got.trace))) > room:
            missing[rank] = f"{LEFT_OUT}the traces came to more than {UNPACKED_MAX >> 20} MiB"
        else:
            room -= size
            found[rank] = got.trace
    return Collected(found, missing)


@dataclass
class Collected:
    """The traces a stacks dump brought back (as JSON), and what became of them."""

    traces: dict[int, Any]  # rank → its trace, as its host read it (plain data)
    missing: dict[int, str]  # rank → why it has none
    dir: Path | None = None
    verdict: str | None = None  # the analyser's findings; None when there was none

    async def save(self, where: Path, analyse: Analyse | None = None) -> None:
        """Write each rank's trace into `where` (JSON, private) and have them analysed."""
        if not self.traces:
            return
        private_dir(where)
        for rank, trace in self.traces.items():
            write_private(where / f"{TRACE}{rank}.json", json.dumps(trace))
        self.dir = where
        if analyse is not None:
            self.verdict = clean(await analyse(json.dumps(self.traces).encode()))
            write_private(where / VERDICT, self.verdict + "\n")

    def lines(self) -> list[str]:
        head = f"flight recorder: {len(self.traces)} trace(s)"
        if self.dir is not None:
            head += f" in {self.dir}"
        out = [head]
        out += [f"  rank {r}: {why}" for r, why in sorted(self.missing.items())]
        if self.verdict is not None:
            out += ["  " + ln for ln in self.verdict.splitlines()[:VERDICT_LINES]]
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "dir": str(self.dir) if self.dir else None,
            "ranks": sorted(self.traces),
            "missing": {str(r): why for r, why in sorted(self.missing.items())},
            "verdict": self.verdict,
        }
