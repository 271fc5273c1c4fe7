"""A rank's lines on a node's stream, host side: `[3]:hello` is rank 3's line "hello"; a line
with no tag is the node's own.

The tag is torchrun's own (`--tee`); tail.py writes it for the ranks it reads from their files.
The launcher reads it with its twin, remote/run/ranktag.py (the same names; the host code ships
alone, so each side keeps its copy). linebuf.py writes it too, on its own: it runs inside the
job's python, where this package is not importable.
"""

import re

TAGGED = re.compile(r"^(?:\[(\d{1,9})\]:)?(.*)$", re.MULTILINE)  # the last line may be partial


def tag(rank):
    """The bytes that start each of rank's lines."""
    return b"[%d]:" % rank


def untag(text):
    """[(rank or None, line)] for each line of text, the last one even without its newline."""
    return [(int(rank) if rank else None, line) for rank, line in TAGGED.findall(text)]


def prefix(data):
    """The tag data starts with (b"" if none): a piece of a long line repeats it."""
    if data.startswith(b"[") and b"]:" in data[:12]:
        return data[: data.index(b"]:") + 2]
    return b""
