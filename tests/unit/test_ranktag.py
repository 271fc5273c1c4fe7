"""The `[rank]:text` tag: the host writes it and reads it (remote/host/ranktag.py), the job's own
python writes it (remote/host/linebuf.py), the launcher reads it (remote/run/ranktag.py): one
tag, one reading."""

from __future__ import annotations

import ddptui.remote.host.ranktag
import ddptui.remote.run.ranktag
from ddptui.remote.host import linebuf

HOST = ddptui.remote.host.ranktag  # the twins share their names: each named by its side
LAUNCHER = ddptui.remote.run.ranktag

LINES = "[3]:hello\n[12]:step 4 loss 0.5\nnode's own line\n[x]:not a tag\n[3]:\n[]:empty\n"


def test_both_sides_read_a_chunk_the_same() -> None:
    launcher = LAUNCHER.untag(LINES)
    assert launcher == (
        (3, "hello"), (12, "step 4 loss 0.5"), (None, "node's own line"),
        (None, "[x]:not a tag"), (3, ""), (None, "[]:empty"),
    )  # fmt: skip
    assert HOST.untag(LINES)[: len(launcher)] == list(launcher)


def test_what_the_host_writes_the_launcher_reads() -> None:
    tagged = HOST.tag(7) + b"hello\n"
    assert LAUNCHER.untag(tagged.decode()) == ((7, "hello"),)
    assert HOST.prefix(tagged) == b"[7]:" and HOST.prefix(b"hello\n") == b""


def test_a_whole_chunk_of_one_rank() -> None:
    assert LAUNCHER.untag("[1]:a\n[1]:b\n") == ((1, "a"), (1, "b"))
    assert LAUNCHER.untag("[1]:partial") == ()  # the launcher reads whole lines only


def test_the_jobs_own_python_writes_the_same_tag() -> None:
    assert f"\n_FORMAT = {HOST.FORMAT!r}  #" in linebuf.SITECUSTOMIZE
    assert "@FORMAT@" not in linebuf.SITECUSTOMIZE
    assert LAUNCHER.untag(HOST.FORMAT % 5 + "hi\n") == ((5, "hi"),)
    assert LAUNCHER.untag(LAUNCHER.tagged(5, "hi")) == ((5, "hi"),)
