"""The bytes between a launcher and a host: agent frames, node streams, spool records. Bounded.

Three layers, each with its encoder (run on the hosts: python3 >= 3.8, standard library only)
and its decoder (run in the launcher, and in the agent for what the launcher sends):

1. The agent's stdout: whatever the login shell printed first (a banner, a greeting python
   wrapper: shown as the host's own output), then a mark line, then frames, each on a channel:

       CHAN KIND LEN\\n PAYLOAD         KIND: j JSON, d data, e end of the channel

   Before the agent runs, the boot may ask for the code it lacks: a NEED line
   (remote/agents/shipper.py). The launcher writes frames to the agent's stdin the same way (no
   mark).

2. A node's stream (a `start` or `attach` channel's data), as the node's supervisor serves it:

       D OFFSET LEN\\n BYTES            spool bytes from OFFSET
       H JSON\\n                        out of band: hello, heartbeat, trimmed, eof

   The launcher's words to the supervisor go the other way as text lines (protocol.SAY_*).

3. The spool: the node's whole story as its supervisor wrote it on the host; a record's offset
   never changes, so a viewer that comes back asks for "everything from N":

       KIND TS LEN\\n PAYLOAD           KIND: 1 stdout, 2 stderr (whole lines), m meta (JSON);
                                       TS: the host's clock, ms

Every decoder is bounded (what a host sends is data, and a broken or hostile one must not pin
the launcher): a noise line is passed on in pieces of NOISE_MAX, a frame or record may claim at
most FRAME_MAX bytes, and anything else that is not a frame raises Garbage, naming what came.
"""

from __future__ import annotations

import json
import re

TYPE_CHECKING = False  # typing costs import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

MARK = b"DDPTUI-AGENT-1\n"
NEED = b"DDPTUI-NEED-1 "  # + the code's hash: the boot asks for the code it lacks
RECORD_MAX = 1 << 18  # a longer output line is cut into pieces of this size
FRAME_MAX = 16 << 20  # the most any frame or record may claim
NOISE_MAX = 64 << 10  # a noise line longer than this is passed on in pieces
HEADER_MAX = 1 << 16  # an H frame's JSON
_FRAME = re.compile(rb"(\d{1,9}) ([jde]) (\d{1,9})\n")
_RECORD = re.compile(rb"([12m]) (\d{1,15}) (\d{1,9})\n")
_DATA = re.compile(rb"D (\d{1,18}) (\d{1,9})\n")


class Garbage(ValueError):
    """Bytes that are not the protocol where only the protocol may come."""

    def __init__(self, what: str, data: bytes | bytearray) -> None:
        super().__init__(f"{what}: {bytes(data[:80])!r}")


# -- encoders ------------------------------------------------------------------------------------


def frame(chan: int, kind: bytes, payload: bytes = b"") -> bytes:
    return b"%d %s %d\n" % (chan, kind, len(payload)) + payload


def jframe(chan: int, msg: dict[str, Any]) -> bytes:
    return frame(chan, b"j", json.dumps(msg).encode())


def record(kind: bytes, ts_ms: int, payload: bytes) -> bytes:
    return b"%s %d %d\n" % (kind, ts_ms, len(payload)) + payload


def meta(ts_ms: int, **msg: Any) -> bytes:
    return record(b"m", ts_ms, json.dumps(msg).encode())


def data_frame(offset: int, chunk: bytes) -> bytes:
    return b"D %d %d\n" % (offset, len(chunk)) + chunk


def control(**msg: Any) -> bytes:
    return b"H " + json.dumps(msg).encode() + b"\n"


# -- 1. agent frames -----------------------------------------------------------------------------


class Noise:
    """Bytes a host printed outside the protocol: shown as the host's own output."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class Need:
    """The boot lacks the code with this hash: send it."""

    __slots__ = ("hash",)

    def __init__(self, digest: str) -> None:
        self.hash = digest


class Frame:
    __slots__ = ("chan", "kind", "payload")

    def __init__(self, chan: int, kind: bytes, payload: bytes) -> None:
        self.chan, self.kind, self.payload = chan, kind, payload

    def message(self) -> dict[str, Any]:
        """A `j` frame's JSON object; Garbage if it is none."""
        try:
            msg = json.loads(self.payload)
        except ValueError:
            msg = None
        if not isinstance(msg, dict):
            raise Garbage("a JSON frame that is not an object", self.payload)
        return msg


class FrameReader:
    """Cuts a byte stream into Noise, Need and Frame items; feed it what arrives.

    marked=False: the agent's stdout, noise and a NEED line allowed before the mark. Linear in
    what is fed, and never holds more than one frame (or NOISE_MAX of a noise line)."""

    def __init__(self, marked: bool = False) -> None:
        self.buf = bytearray()
        self.at = 0  # bytes of buf already taken
        self.seen = 0  # of buf[at:], bytes known to hold no newline (before the mark)
        self.marked = marked
        self.noise = 0  # noise bytes passed on before the mark

    def feed(self, data: bytes) -> list[Noise | Need | Frame]:
        if self.at:
            del self.buf[: self.at]
            self.at = 0
        self.buf += data
        items: list[Noise | Need | Frame] = []
        while True:
            item = self._frame() if self.marked else self._before_mark()
            if item is None:
                return items
            items.append(item)

    def _before_mark(self) -> Noise | Need | Frame | None:
        buf, at = self.buf, self.at
        end = buf.find(b"\n", at + self.seen)
        if end < 0:
            self.seen = len(buf) - at
            if self.seen < NOISE_MAX:
                return None
            return self._noise(at + NOISE_MAX)  # a runaway line: in pieces
        self.seen = 0
        line = bytes(buf[at : end + 1])
        for mark in (MARK, NEED):
            found = line.find(mark.rstrip(b"\n"))
            if found > 0:  # a banner's unfinished line ends where the mark begins
                return self._noise(at + found)
            if found == 0:
                self.at = end + 1
                if mark is MARK:
                    self.marked = True
                    return self._frame()
                return Need(line[len(NEED) :].strip().decode("ascii", "replace"))
        return self._noise(end + 1)

    def _noise(self, upto: int) -> Noise:
        chunk = bytes(self.buf[self.at : upto])
        self.at = upto
        self.noise += len(chunk)
        return Noise(chunk)

    def _frame(self) -> Frame | None:
        buf, at = self.buf, self.at
        end = buf.find(b"\n", at, at + 32)
        if end < 0:
            if len(buf) - at >= 32:
                raise Garbage("not a frame", buf[at:])
            return None
        m = _FRAME.fullmatch(buf, at, end + 1)
        if m is None:
            raise Garbage("not a frame", buf[at:])
        size = int(m.group(3))
        if size > FRAME_MAX:
            raise Garbage(f"a frame of {size} bytes", buf[at:])
        if end + 1 + size > len(buf):
            return None
        self.at = end + 1 + size
        return Frame(int(m.group(1)), m.group(2), bytes(buf[end + 1 : self.at]))


# -- 2. a node's stream --------------------------------------------------------------------------


class Data:
    __slots__ = ("data", "offset")

    def __init__(self, offset: int, data: bytes) -> None:
        self.offset, self.data = offset, data


class WireReader:
    """Cuts a node's stream into Data and control (dict) items; Garbage for anything else."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self._want: tuple[int, int] | None = None  # a D frame whose bytes are still arriving

    def feed(self, data: bytes) -> list[Data | dict[str, Any]]:
        self.buf += data
        items: list[Data | dict[str, Any]] = []
        while True:
            item = self._next()
            if item is None:
                return items
            items.append(item)

    def _next(self) -> Data | dict[str, Any] | None:
        buf = self.buf
        if self._want is not None:
            offset, length = self._want
            if len(buf) < length:
                return None
            chunk = bytes(buf[:length])
            del buf[:length]
            self._want = None
            return Data(offset, chunk)
        end = buf.find(b"\n", 0, HEADER_MAX)
        if end < 0:
            if len(buf) >= HEADER_MAX:
                raise Garbage("not a stream frame", buf)
            return None
        line = bytes(buf[: end + 1])
        m = _DATA.fullmatch(line)
        if m is not None:
            if int(m.group(2)) > FRAME_MAX:
                raise Garbage("a stream frame too large", line)
            del buf[: end + 1]
            self._want = (int(m.group(1)), int(m.group(2)))
            return self._next()
        if line.startswith(b"H "):
            try:
                msg = json.loads(line[2:])
            except ValueError:
                msg = None
            if isinstance(msg, dict):
                del buf[: end + 1]
                return msg
        raise Garbage("not a stream frame", line)


# -- 3. spool records ----------------------------------------------------------------------------


class SpoolReader:
    """Cuts spool bytes (in any pieces) into records: (kind, ts_ms, payload, end), where end
    counts the bytes read up to the record's end (add the offset the reader started at)."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.done = 0  # bytes of complete records cut so far

    def feed(self, data: bytes) -> list[tuple[bytes, int, bytes, int]]:
        buf = self.buf
        buf += data
        out: list[tuple[bytes, int, bytes, int]] = []
        at = 0
        while True:
            end = buf.find(b"\n", at, at + 40)
            if end < 0:
                if len(buf) - at >= 40:
                    raise Garbage("a spool record header expected", buf[at:])
                break
            m = _RECORD.fullmatch(buf, at, end + 1)
            if m is None:
                raise Garbage("a spool record header expected", buf[at:end])
            length = int(m.group(3))
            if length > FRAME_MAX:
                raise Garbage(f"a spool record of {length} bytes", buf[at:end])
            if end + 1 + length > len(buf):
                break
            at = end + 1 + length
            out.append((m.group(1), int(m.group(2)), bytes(buf[end + 1 : at]), self.done + at))
        del buf[:at]
        self.done += at
        return out
