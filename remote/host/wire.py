"""The bytes between a host's supervisor and a launcher: spool records inside wire frames.

The spool is the node's whole story as the supervisor wrote it on the host, one record after
another; a record's place in it (its byte offset) never changes, so a viewer that comes back
asks for "everything from offset N" and gets no line twice and none missed:

    record   KIND TS LEN\\n PAYLOAD    KIND: 1 stdout, 2 stderr (whole lines, raw bytes),
                                      m meta (JSON); TS: host clock, ms; LEN: payload bytes

On the wire, after a mark line (anything a host prints before it, a login banner or a greeting
python wrapper, is that host's own output), come frames:

    D OFFSET LEN\\n BYTES              spool bytes from OFFSET
    H JSON\\n                          out of band: hello, heartbeat, trimmed, eof

Launcher to supervisor: text lines (`hello OFFSET`, `ping`, `stop`, `detach`, ...).

Both ends live here: the encoders run on the hosts (python3 >= 3.8, standard library only), the
decoders in the launcher; one module keeps them in step.
"""

from __future__ import annotations

import json
import re

TYPE_CHECKING = False  # typing costs import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

MARK = b"DDPTUI-WIRE-1\n"
RECORD_MAX = 1 << 18  # a longer output line is cut into pieces of this size
HEADER_MAX = 1 << 16  # an H frame's JSON, or a header line; longer: not ours
_RECORD = re.compile(rb"([12m]) (\d{1,15}) (\d{1,9})\n")
_DATA = re.compile(rb"D (\d{1,18}) (\d{1,9})\n")


# -- host side -----------------------------------------------------------------------------------


def record(kind: bytes, ts_ms: int, payload: bytes) -> bytes:
    return b"%s %d %d\n" % (kind, ts_ms, len(payload)) + payload


def meta(ts_ms: int, **msg: Any) -> bytes:
    return record(b"m", ts_ms, json.dumps(msg).encode())


def data_frame(offset: int, chunk: bytes) -> bytes:
    return b"D %d %d\n" % (offset, len(chunk)) + chunk


def control(**msg: Any) -> bytes:
    return b"H " + json.dumps(msg).encode() + b"\n"


# -- launcher side -------------------------------------------------------------------------------


class Noise:
    """Bytes a host printed outside the protocol: shown as the host's own output."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class Data:
    __slots__ = ("data", "offset")

    def __init__(self, offset: int, data: bytes) -> None:
        self.offset, self.data = offset, data


class WireReader:
    """Cuts a byte stream into Noise, Data and control (dict) items; feed it what arrives."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.marked = False
        self._want: tuple[int, int] | None = None  # a D frame whose bytes are still arriving

    def feed(self, data: bytes) -> list[Noise | Data | dict[str, Any]]:
        self.buf += data
        items: list[Noise | Data | dict[str, Any]] = []
        while True:
            item = self._next()
            if item is None:
                return items
            items.append(item)

    def _next(self) -> Noise | Data | dict[str, Any] | None:
        buf = self.buf
        if not self.marked:
            at = buf.find(MARK)
            if at < 0:  # keep a possible partial mark; what is before it is noise
                keep = len(MARK) - 1
                if len(buf) <= keep:
                    return None
                return self._take_noise(len(buf) - keep)
            if at:
                return self._take_noise(at)
            del buf[: len(MARK)]
            self.marked = True
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
            return self._take_noise(len(buf)) if len(buf) >= HEADER_MAX else None
        line = bytes(buf[: end + 1])
        m = _DATA.fullmatch(line)
        if m:
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
        return self._take_noise(end + 1)  # not a frame: show it, carry on with the next line

    def _take_noise(self, n: int) -> Noise:
        chunk = bytes(self.buf[:n])
        del self.buf[:n]
        return Noise(chunk)


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
                    raise ValueError("spool record header expected")
                break
            m = _RECORD.fullmatch(buf, at, end + 1)
            if m is None:
                raise ValueError(f"spool record header expected at {bytes(buf[at:end])!r}")
            length = int(m.group(3))
            if end + 1 + length > len(buf):
                break
            at = end + 1 + length
            out.append((m.group(1), int(m.group(2)), bytes(buf[end + 1 : at]), self.done + at))
        del buf[:at]
        self.done += at
        return out
