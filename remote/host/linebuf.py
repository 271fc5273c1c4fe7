"""The job's Python processes in the spawn and env (Lightning) styles, made to write whole
lines, tagged with their rank when known.

There a node's processes share one stdout pipe; with PYTHONUNBUFFERED each print() is two
writes (text, newline), so two ranks' lines glue together. (The torchrun styles need no wrapper:
each rank writes files of its own, which the supervisor reads, remote/host/tail.py.)
The supervisor writes SITECUSTOMIZE as sitecustomize.py into a private directory put first on
the job's PYTHONPATH: every Python process of the job then writes each line in one write()
(atomic on a pipe up to PIPE_BUF), and, once it has joined torch's process group, starts each
line with `[<global rank>]:` as torchrun's tee does, so the launcher files it under its rank.
An unfinished line is held up to 64 KiB, then leaves as a line piece: a rank that writes
endlessly without a newline costs linear time and bounded memory.
Then it runs the host's own sitecustomize, if there is one. Standard library only.

Before all that, in every style's sitecustomize (torchrun's holds only this, RANKS_ONLY), each
rank asks the kernel to end it with its launcher (remote/host/deathsig.py).
"""

import os

from . import deathsig, ranktag

HEAD = r"""# Written by ddptui's supervisor (see remote/host/linebuf.py in ddptui).
import io, os, sys, threading
"""

LINES = r'''

_ident = threading.get_ident


def _rank():
    d = sys.modules.get("torch.distributed")
    try:
        if d is not None and d.is_available() and d.is_initialized():
            return d.get_rank()
    except Exception:
        pass
    return None


class _Lines(io.TextIOWrapper):
    """Whole lines only, one write() each; `[rank]:` first once this process has a rank.
    Each thread keeps its own unfinished line: one thread's half line must not take in
    another's."""

    _tag = None  # "[3]:" once known
    _bol = True  # the next character starts a line
    _rests = None  # thread id -> its unfinished line, [length, pieces] (set by _wrap)

    # No lock of our own: a daemon thread frozen holding it at exit would hang the process's
    # last flush. The C writer under us keeps each write() whole.

    def write(self, s):
        # print() calls this twice a line: kept lean.
        if not s:
            return 0
        n = len(s)
        if self._tag is None and _TAGS:
            rank = _rank()
            if rank is not None:
                self._tag = _FORMAT % rank
        rests, me = self._rests, _ident()
        held = rests.pop(me, None)  # this thread's unfinished line: [length, pieces]
        if held is _CUT:  # its line left as a piece: the newline that ends it is said
            held = None
            if s[0] == "\n":
                s = s[1:]
                if not s:
                    return n
        cut = s.rfind("\n") + 1
        if cut:  # line_buffering: the text ends with a newline, so it leaves now
            self._emit(s[:cut] if held is None else "".join(held[1]) + s[:cut])
            if cut == n:
                return n
            held, s = None, s[cut:]
        # Pieces are joined once, at the line's end: linear however long the line grows.
        if held is None:
            held = [0, []]
        held[0] += len(s)
        held[1].append(s)
        if held[0] < _CAP:
            rests[me] = held
        else:  # an endless line leaves in pieces, each a line
            self._emit("".join(held[1]) + "\n")
            rests[me] = _CUT  # print()'s own newline, next, adds no empty line
        return n

    def flush(self):
        held = self._rests.pop(_ident(), None) if self._rests else None
        if held:  # asked for: a prompt, a progress bar (a line just cut has nothing held)
            self._emit("".join(held[1]))
        super().flush()

    def _emit(self, text):
        tag = self._tag
        if tag:
            body = (tag if self._bol else "") + text.replace("\n", "\n" + tag)
            text = body[: -len(tag)] if text.endswith("\n") else body
        self._bol = text.endswith("\n")
        super().write(text)


def _wrap(name):
    old = getattr(sys, name)
    try:
        old.flush()
        new = _Lines(
            old.detach(), encoding=old.encoding, errors=old.errors, line_buffering=True
        )
    except Exception:
        return
    new._rests = {}
    setattr(sys, name, new)
    setattr(sys, "__%s__" % name, new)


_CAP = 1 << 16  # characters of one unfinished line held at most; then it leaves as a piece
_CUT = []  # in _rests: the thread's last write ended its line as a piece
_TAGS = os.environ.get("DDPTUI_RANK_TAGS") == "1"
_FORMAT = "@FORMAT@"  # the tag: remote/host/ranktag.py's, put here as this source is written
_wrap("stdout")
_wrap("stderr")
'''.replace('"@FORMAT@"', repr(ranktag.FORMAT))

# Then the host's own sitecustomize, if it has one: we only went first.
CHAIN = r"""
_here = os.path.dirname(os.path.abspath(__file__))
_path = sys.path[:]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_me = sys.modules.pop("sitecustomize")
try:
    import sitecustomize  # noqa: F401
except ImportError:
    pass
finally:
    sys.path[:] = _path
    sys.modules.setdefault("sitecustomize", _me)  # the import that ran us looks for one
"""

SITECUSTOMIZE = HEAD + deathsig.RANKS + LINES + CHAIN  # the spawn and env styles
RANKS_ONLY = HEAD + deathsig.RANKS + CHAIN  # the others' (torchrun's)


def site_dir(ndir: str, lines: bool = True) -> str:
    """The private directory holding the job's sitecustomize in node directory `ndir`, written
    once: its ranks die with their launcher (deathsig.RANKS), their lines whole where `lines`
    (SITECUSTOMIZE), then the host's own sitecustomize runs."""
    site = os.path.join(ndir, "py")
    if not os.path.isdir(site):
        os.mkdir(site, 0o700)
        with open(os.path.join(site, "sitecustomize.py"), "w") as f:
            f.write(SITECUSTOMIZE if lines else RANKS_ONLY)
    return site
