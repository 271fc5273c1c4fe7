"""One host's supervisor as the launcher sees it: its spool, read across SSH connections.

A link remembers how far into the node's spool it has read (complete records only), so a new
connection asks for exactly the next byte: no record twice, none missed. What a host prints
outside the protocol comes out as Noise, to be shown as the host's own output.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from . import bootstrap
from .host import wire
from .transport import Process, Transport

READ = 1 << 18


@dataclass(frozen=True, slots=True)
class Record:
    """One spool record: a batch of whole lines (stream 1 or 2), or a message (meta)."""

    kind: bytes  # b"1" stdout, b"2" stderr, b"m" meta
    at: float  # host clock, seconds
    data: bytes
    end: int  # spool offset just past this record

    def message(self) -> dict[str, Any]:
        msg = json.loads(self.data)
        assert isinstance(msg, dict)
        return msg


@dataclass(frozen=True, slots=True)
class Noise:
    text: str


Item = Record | Noise | dict[str, Any]  # a dict: an out-of-band control message


class NodeLink:
    def __init__(self, transport: Transport, run_id: str, node: int) -> None:
        self.transport, self.run_id, self.node = transport, run_id, node
        self.proc: Process | None = None
        self.heard = time.monotonic()  # the last byte from the host
        self.ended = False  # the supervisor said the stream is complete
        self.lost = False  # given up on: not heard from for link_timeout
        self.hello: dict[str, Any] = {}
        self._fed = 0  # spool offset of the next byte for the reader
        self._history = False  # this link attached to a run already going (or gone)
        self._noise = b""  # the start of a line the host printed outside the protocol
        self._wire = wire.WireReader()
        self._spool = wire.SpoolReader()

    @property
    def replaying(self) -> bool:
        """Reading what was spooled before this connection began (an attach's history)."""
        return self.offset <= int(self.hello.get("spool_end", 0)) and self._history

    @property
    def offset(self) -> int:
        """Where a new connection resumes: the end of the last complete record."""
        return self._fed - len(self._spool.buf)

    async def open(self, cmd: dict[str, Any]) -> None:
        """A new SSH exec (start the supervisor, or attach to it), resuming at `offset`."""
        offset = self.offset
        self._history = self._history or (cmd.get("do") == "attach" and offset == 0)
        self.close()
        python = self.transport.host.python
        self.proc = await self.transport.start(bootstrap.command(python))
        self._fed, self._wire, self._spool = offset, wire.WireReader(), wire.SpoolReader()
        self.proc.write(bootstrap.payload(cmd) + b"hello %d\n" % offset)

    def send(self, line: str) -> None:
        if self.proc is not None:
            self.proc.write(line.encode() + b"\n")

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc = None

    async def read(self) -> list[Item] | None:
        """What arrived next; None when this connection is over (see `ended`)."""
        if self.proc is None:
            return None
        data = await self.proc.read(READ)
        if not data:
            self.proc = None
            return None
        self.heard = time.monotonic()
        items: list[Item] = []
        for it in self._wire.feed(data):
            if isinstance(it, wire.Noise):
                self._noise += it.data
                cut = self._noise.rfind(b"\n") + 1
                if cut:
                    items.append(_noise(self._noise[:cut]))
                    self._noise = self._noise[cut:]
                continue
            if self._noise:  # the protocol began: a banner's unfinished line ends here
                items.append(_noise(self._noise))
                self._noise = b""
            if isinstance(it, wire.Data):
                items += self._records(it.offset, it.data)
            else:
                items.append(it)
                self._control(it)
        return items

    def _records(self, offset: int, data: bytes) -> list[Item]:
        skip = self._fed - offset  # already read over an earlier connection
        if skip >= len(data):
            return []
        if skip > 0:
            data = data[skip:]
        base = self._fed - len(self._spool.buf) - self._spool.done  # where this reader began
        self._fed += len(data)
        return [
            Record(kind, ts / 1000.0, payload, base + end)
            for kind, ts, payload, end in self._spool.feed(data)
        ]

    def _control(self, msg: dict[str, Any]) -> None:
        kind = msg.get("t")
        if kind == "hello":
            self.hello = msg
        elif kind == "eof":
            self.ended = True
        elif kind == "trimmed":  # gone from the host before we read it: carry on from there
            self._fed, self._spool = int(msg["at"]), wire.SpoolReader()


def _noise(data: bytes) -> Noise:
    return Noise(data.decode("utf-8", "surrogateescape"))
