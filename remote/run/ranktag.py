"""A rank's lines on a node's stream, launcher side: `[3]:hello` is rank 3's line "hello"; a
line with no tag is the node's own (torchrun's, the supervisor's, a style that tags nothing).

The tag is torchrun's own (`--tee`); the host writes it where torchrun does not
(remote/host/ranktag.py, which says how it reads: TAG). This side reads whole lines (and tags one
a host sent apart, to read it as the others).
"""

from __future__ import annotations

import re
from itertools import repeat
from operator import itemgetter

from ddptui.remote.host.ranktag import FORMAT, TAG

# `[<global rank>]:text`, each whole line
TAGGED = re.compile(r"^(?:" + TAG + r")?(.*)\n", re.MULTILINE)

Lines = tuple[tuple[int | None, str], ...]


def tagged(rank: int, text: str) -> str:
    """One line of rank's as its host sends it: `[3]:hello` and the newline."""
    return FORMAT % rank + text + "\n"


def untag(data: str) -> Lines:
    """Each whole line of data: `[3]:hello` → (3, "hello"); a node's own lines carry no tag."""
    found = TAGGED.findall(data)  # one pass in C over the whole chunk
    ranks = {tag: int(tag) if tag else None for tag in set(map(itemgetter(0), found))}
    if len(ranks) == 1:  # the usual chunk: one rank's lines
        return tuple(zip(repeat(ranks.popitem()[1]), map(itemgetter(1), found)))
    return tuple([(ranks[tag], text) for tag, text in found])
