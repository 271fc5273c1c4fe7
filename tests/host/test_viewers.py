"""A supervisor's viewers (remote/host/viewers.py): a launcher's words are its lease and its
commands; a viewer that says `hello OFFSET view` (a read-only dashboard) only watches."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from ddptui.remote.host.viewers import Viewers


def said(hello: bytes) -> tuple[list[list[str]], bool]:
    """The commands the supervisor took from a viewer that said `hello`, then stop, detach and
    a ping, and whether its words renewed the lease."""
    commands: list[list[str]] = []
    viewers = Viewers(None, dict, commands.append, 1.0)
    viewers._send_spool = lambda *a: None  # type: ignore[method-assign]
    ours, theirs = socket.socketpair()
    viewers.heard = before = time.monotonic() - 100
    done = threading.Event()
    viewers.clients[theirs] = [time.monotonic(), done]
    client = threading.Thread(target=viewers._client, args=(theirs, done))
    client.start()
    ours.sendall(hello + b"\nstop\ndetach\nping\n")
    ours.close()
    client.join(10)
    return commands, viewers.heard > before


def test_a_launcher_holds_the_lease_and_commands() -> None:
    commands, renewed = said(b"hello 0")
    assert commands == [["stop"], ["detach"], ["ping"]] and renewed


@pytest.mark.security
def test_a_viewer_holds_no_lease_and_commands_nothing() -> None:
    """A read-only dashboard neither stops nor detaches the run, nor keeps it attached once its
    owner's launcher is gone."""
    commands, renewed = said(b"hello 0 view")
    assert commands == [] and not renewed
