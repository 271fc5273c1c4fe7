"""Each rank's main thread looked at once a second, host side, for the straggler rule
(remote/host/straggle.py): whether it waits for its peers in a collective.

Two looks, the better one counting where it can be had:

- its stack (py-spy, `--nonblocking`: the rank is never paused): inside one of
  torch.distributed's collectives (distributed_c10d.py: all_reduce, barrier, all_gather...), or
  in DDP's backward while idle (its reducer waits there for the gradient all-reduce; a backward
  that computes runs). This holds wherever the waiting ranks block in the collective, whether they
  sleep there (gloo) or spin, and whatever the slow rank does meanwhile: computes, or sleeps on its
  input (a slow disk or DataLoader), which a sleeping-or-running look cannot tell from waiting;
- where no stack can be read (no py-spy, no ptrace rights): whether the main thread sleeps
  (/proc), as a gloo rank waiting in a collective does. Blind where the slow rank sleeps too.

Counts are cumulative, [waiting, looks] per rank for each kind; node 0 takes deltas over its
window. python3 >= 3.8, stdlib only.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

from . import procs

TYPE_CHECKING = False  # typing costs milliseconds of import on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any

LOOK_S = 1.0  # between two looks
SPY_S = 5.0  # one look's py-spy, at most: a slow one costs a look, never the next ones
COLLECTIVES = "torch/distributed/distributed_c10d.py"  # every collective's Python entry
BACKWARD = ("_engine_run_backward", "torch/autograd/graph.py")  # DDP's reducer waits under it


def waiting(thread: dict[str, Any]) -> bool:
    """Whether a main thread's stack (remote/host/stacks.py's form) waits for its peers."""
    for frame in thread.get("frames") or ():
        path = str(frame.get("path") or frame.get("file") or "")
        if path.endswith(COLLECTIVES):
            return True
        if frame.get("function") == BACKWARD[0] and path.endswith(BACKWARD[1]):
            return thread.get("active") is False
    return False


def _state(pid: int) -> bytes | None:
    """The main thread's state letter (R, S, D...), None if it is gone."""
    got = procs._stat(pid)
    return got[1][0] if got is not None and got[1] else None


def _main(threads: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((t for t in threads if t.get("main")), threads[0] if threads else None)


class Looks:
    """One node's counts: {rank: [asleep, looks]} from /proc, {rank: [waiting, looks]} from
    stacks. `look` is called by one thread; `counts` read by another (the hub's ask)."""

    def __init__(self) -> None:
        self.asleep: dict[int, list[int]] = {}
        self.waits: dict[int, list[int]] = {}

    def look(self, by_pid: dict[int, int], spy: str | None) -> None:
        """One look at every rank: its state, and its stack where py-spy reads it."""
        for pid, rank in by_pid.items():
            state = _state(pid)
            if state is not None:
                seen = self.asleep.setdefault(rank, [0, 0])
                seen[0] += state == b"S"
                seen[1] += 1
        if spy is None or not by_pid:
            return
        from .stacks import dump_all

        for key, dumped in dump_all(spy, by_pid, False, nonblocking=True, timeout=SPY_S).items():
            main = _main(dumped.get("threads") or [])
            if main is not None and main.get("frames"):  # a torn or failed read: no look
                seen = self.waits.setdefault(int(key), [0, 0])
                seen[0] += waiting(main)
                seen[1] += 1

    def counts(self, rank: int) -> dict[str, list[int]]:
        """What a sample says of `rank`: its asleep and waiting counts, where it has them."""
        out = {}
        for name, kept in (("asleep", self.asleep), ("waits", self.waits)):
            if rank in kept:
                out[name] = list(kept[rank])
        return out
