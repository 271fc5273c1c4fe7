"""ddptui's private state on a host: the code it was sent, and each run's node directories.

    <state>/ddptui/code/<hash>/ddph/     the host code, as shipped (remote/agents/shipper.py)
    <state>/ddptui/runs/<run id>/n<k>/   a node's supervisor: spool, socket, state.json, log
    <state>/ddptui/runs/<run id>/n<k>-a<n>/  the same, of a spare that took node k's place at
                                         attempt n

<state> is $XDG_STATE_HOME, else ~/.local/state. Every level ddptui makes is 0700 and must be
this user's own: a directory another user can write to is refused, never used.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import time

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Mapping

    from .protocol import NodeState

KEEP_DAYS = 14  # finished runs' directories are removed after this long
STATE = "state.json"


def state_root() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "ddptui")


def runs_dir() -> str:
    return os.path.join(state_root(), "runs")


def node_dir(run_id: str, node: int, since: int = 0) -> str:
    """`n1`; a spare that took node 1's place at attempt 2, `n1-a2` (a shared home holds
    both). This module runs alone at the boot, before the package is there: no imports."""
    name = "n{}".format(node) if not since else "n{}-a{}".format(node, since)
    return os.path.join(runs_dir(), run_id, name)


def private_dirs(path: str) -> None:
    """Make path (under state_root) and ddptui's parents of it 0700; refuse another's."""
    root = state_root()
    os.makedirs(os.path.dirname(root), exist_ok=True)  # ~/.local/state: the user's own
    levels = [root] + [p for p in _parents(path) if len(p) > len(root)]
    for p in levels:
        with contextlib.suppress(FileExistsError):
            os.mkdir(p, 0o700)
        st = os.lstat(p)
        if st.st_uid != os.getuid() or not os.path.isdir(p) or os.path.islink(p):
            raise OSError("{} is not a directory of this user's".format(p))
        if st.st_mode & 0o077:
            os.chmod(p, 0o700)


def _parents(path):
    out = [path]
    while os.path.dirname(out[-1]) != out[-1]:
        out.append(os.path.dirname(out[-1]))
    return list(reversed(out))


def read_state(ndir: str) -> NodeState:
    try:
        with open(os.path.join(ndir, STATE)) as f:
            found: NodeState = json.load(f)  # what a supervisor wrote, or not a dict
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def prune(keep_days: float = KEEP_DAYS) -> None:
    """Forget finished runs older than keep_days (best effort)."""
    runs = runs_dir()
    cutoff = time.time() - keep_days * 86400
    try:
        names = os.listdir(runs)
    except OSError:
        return
    for name in names:
        run = os.path.join(runs, name)
        try:
            states = [read_state(os.path.join(run, n)) for n in os.listdir(run)]
            if states and all(s.get("ended") and s["ended"] < cutoff for s in states):
                shutil.rmtree(run, ignore_errors=True)
        except OSError:
            continue


def _private(path):
    """A directory of this user's that nobody else may write to."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def install_code(digest: str, sources: Mapping[str, str]) -> str | None:
    """Keep the shipped code under the state dir, keyed by its hash: the next command sends the
    hash alone. Returns the directory holding the package `ddph`, or None if it cannot be kept
    (a read-only home): the code then runs from memory."""
    code = os.path.join(state_root(), "code")
    final = os.path.join(code, digest)
    try:
        private_dirs(code)
        if os.path.lexists(final):  # kept earlier: used only if nobody else could have written it
            return final if _private(final) and _private(os.path.join(final, "ddph")) else None
        tmp = os.path.join(code, ".{}.{}".format(digest, os.getpid()))
        os.mkdir(tmp, 0o700)
        os.mkdir(os.path.join(tmp, "ddph"), 0o700)
        for name, text in sources.items():
            path = os.path.join(tmp, "ddph", name + ".py")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
        try:
            os.rename(tmp, final)
        except OSError:  # another agent put it there first: theirs is the same code
            shutil.rmtree(tmp, ignore_errors=True)
        return final if os.path.isdir(final) else None
    except OSError:
        return None


def from_memory(sources: Mapping[str, str]) -> None:
    """Serve the package `ddph` from the shipped sources (where they cannot be kept on disk)."""
    import importlib.abc
    import importlib.util
    import sys

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name == "ddph" or (name.startswith("ddph.") and name[5:] in sources):
                return importlib.util.spec_from_loader(name, self, is_package=name == "ddph")
            return None

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            short = module.__name__[5:] or "__init__"
            code = compile(sources.get(short, ""), "ddph/{}.py".format(short), "exec")
            exec(code, module.__dict__)

    sys.meta_path.insert(0, Finder())
    return None
