"""A node's output kept on its host: an append-only byte stream in segment files, bounded.

Offsets count from the run's first byte and never change, so any viewer resumes exactly where it
stopped. Segments are files named by the offset of their first byte (`spool.<offset>`), each
starting on a record boundary; past `max_bytes` the oldest segments go, and a reader asking for
what is gone is told where the spool now starts. Runs on the hosts: standard library only.
"""

from __future__ import annotations

import contextlib
import os
import threading

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Iterator

PREFIX = "spool."


class Trimmed(Exception):
    def __init__(self, start):
        super().__init__(start)
        self.start = start


class Spool:
    def __init__(self, directory: str, max_bytes: int, writable: bool = True) -> None:
        self.dir = directory
        self.max_bytes = max(int(max_bytes), 1 << 16)
        self.segment_bytes = max(self.max_bytes // 8, 1 << 15)
        self.cond = threading.Condition()
        self.segments = sorted(self._existing())  # start offsets
        self.end = self._size_of_all()
        self.closed = False  # no more records will come
        self._fd: int | None = None
        self._seg_size = 0
        if writable and not self.segments:
            self._roll()
        elif writable:
            self._fd = os.open(self._path(self.segments[-1]), os.O_WRONLY | os.O_APPEND)
            self._seg_size = os.fstat(self._fd).st_size

    @property
    def start(self) -> int:
        return self.segments[0] if self.segments else self.end

    def append(self, data: bytes) -> int:
        """Add whole records; returns the bytes trimmed from the front to stay in bounds."""
        with self.cond:
            os.write(self._fd, data)  # type: ignore[arg-type]  # a read-only spool appends nothing
            self.end += len(data)
            self._seg_size += len(data)
            trimmed = 0
            if self._seg_size >= self.segment_bytes:
                self._roll()
                trimmed = self._trim()
            self.cond.notify_all()
        return trimmed

    def close(self) -> None:
        with self.cond:
            self.closed = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self.cond.notify_all()

    def read(self, offset: int, limit: int) -> bytes:
        """Up to `limit` bytes from `offset` (b"" at the end). Raises Trimmed if gone."""
        with self.cond:
            segments, end = list(self.segments), self.end
        if offset < (segments[0] if segments else end):
            raise Trimmed(segments[0] if segments else end)
        if offset >= end:
            return b""
        seg = max(s for s in segments if s <= offset)
        try:
            with open(self._path(seg), "rb") as f:
                f.seek(offset - seg)
                return f.read(min(limit, end - offset))
        except FileNotFoundError:  # trimmed between the look and the read
            return self.read(offset, limit)

    def wait(self, offset: int, timeout: float | None) -> bool:
        """Block until there is data past `offset`, the spool closes, or timeout."""
        with self.cond:
            if self.end <= offset and not self.closed:
                self.cond.wait(timeout)
            return self.end > offset

    def _roll(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL
        self._fd = os.open(self._path(self.end), flags, 0o600)
        self.segments.append(self.end)
        self._seg_size = 0

    def _trim(self) -> int:
        dropped = 0
        while len(self.segments) > 1 and self.end - self.segments[0] > self.max_bytes:
            first = self.segments.pop(0)
            dropped += self.segments[0] - first
            with contextlib.suppress(OSError):
                os.unlink(self._path(first))
        return dropped

    def _existing(self) -> Iterator[int]:
        for name in os.listdir(self.dir):
            if name.startswith(PREFIX) and name[len(PREFIX) :].isdigit():
                yield int(name[len(PREFIX) :])

    def _size_of_all(self) -> int:
        if not self.segments:
            return 0
        return self.segments[-1] + os.path.getsize(self._path(self.segments[-1]))

    def _path(self, start: int) -> str:
        return os.path.join(self.dir, PREFIX + str(start))
