"""NCCL's flight recorder at a hang the run's own watch found (remote/host/watch.py), with or
without a launcher attached: every node's supervisor pokes its ranks' dump pipes and reads their
traces (remote/host/stacks.py: plain data, never unpickled as objects), and sends them to the hub
in pieces: a trace is megabytes, the hub link's line 64 KB. Node 0 keeps them in its node
directory, `flight-<attempt>/` (one JSON file a rank), with torch's analyser's verdict
(`analysis.txt`), where an attach or the launcher copies them from.

Bounded on every side: a piece is a line of the link, a rank's trace at most TRACE_MAX once
unpacked, all of them at most GATHER_MAX as sent and UNPACKED_MAX unpacked (zlib packs a
megabyte of one byte into a kilobyte: a bomb within GATHER_MAX would unpack to tens of
gigabytes), never trusting a size a peer states. A node sends only its own ranks' traces: a
rank that the hang's samples put on another node is refused, and the sender named (it would
have replaced that rank's trace, and so the verdict). Imported by every peer's hub link, it leaves
py-spy's and the analyser's module (stacks.py) to the node that needs it. python3 >= 3.8,
stdlib only.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import base64
import json
import os
import re
import threading
import time
import zlib

from .flightfiles import FOLDER, PIPE_VAR, TRACE, VERDICT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterator, List, Mapping, Optional, Set, Tuple

PIECE = 40 << 10  # base64 characters of one piece: a hub-link line, with room to spare
GATHER_MAX = 64 << 20  # bytes of every node's pieces together, as sent
UNPACKED_MAX = 128 << 20  # bytes of every trace together, unpacked: tens of ranks' rings
LEFT_OUT = "left out: "  # a trace past UNPACKED_MAX, so said
# All of it comes before the attempt ends (a rank stopped dumps nothing), so together with the
# restart it stays within the 30 s a restart after a hang may take.
DUMP_S = 10.0  # how long a rank has to write its trace (NCCL's first dump: ~5 s on an H200)
ANSWER_S = DUMP_S + 3.0  # how long node 0 waits for every node's pieces
VERDICT_S = 10.0  # torch's analyser (~2 s here); past it the traces are kept, unanalysed
VERDICT_LINES = 8  # of its findings, in the hang's word
_MISSING = re.compile(r"missing ranks: \{([0-9, ]+)\}")
_NOISE = ("tabulate is not installed",)


def wanted(spec: Mapping[str, Any]) -> bool:
    """Whether the job's ranks keep a flight recorder (the plan set its pipe)."""
    return PIPE_VAR in (spec.get("env") or {})


def pieces(seq: Any, found: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
    """A node's traces ({rank: {trace} | {error}}, as stacks.flight() read them) as messages
    for the hub: each trace packed (JSON, zlib, base64) and cut into pieces; then `done`,
    with why each rank without a trace has none."""
    errors = {}
    for rank, got in found.items():
        if "trace" not in got:
            errors[rank] = str(got.get("error") or "no trace")
            continue
        packed = base64.b64encode(zlib.compress(json.dumps(got["trace"]).encode(), 6)).decode()
        count = max(1, -(-len(packed) // PIECE))
        for i in range(count):
            yield {"seq": seq, "rank": rank, "i": i, "n": count,
                   "data": packed[i * PIECE:(i + 1) * PIECE]}  # fmt: skip
    yield {"seq": seq, "done": True, "errors": errors}


class Gather:
    """Node 0's side: every node's pieces for one ask, put back together. add() takes a node's
    message (the hub link's threads, node 0's own); wait() returns once every node said done,
    or at the deadline. owners: {rank: node}, each rank's node as the hang's samples found it;
    a node's pieces and words for any other rank are refused, the node named in `foreign`."""

    def __init__(self, seq: Any, nodes: int, owners: Dict[str, int]) -> None:
        self.seq, self.nodes, self.owners = seq, nodes, owners
        self.foreign: Dict[int, Set[str]] = {}  # node -> the ranks not its own it sent
        self.cond = threading.Condition()
        self.parts: Dict[str, List[str]] = {}  # rank -> its pieces so far
        self.count: Dict[str, Any] = {}  # rank -> how many pieces its node said it sends
        self.missing: Dict[str, str] = {}  # rank -> why it has no trace
        self.done: Set[int] = set()
        self.size = 0

    def add(self, node: int, msg: Any) -> None:
        if not isinstance(msg, dict) or msg.get("seq") != self.seq:
            return
        with self.cond:
            if msg.get("done") is True:
                errors = msg.get("errors")
                for rank, why in errors.items() if isinstance(errors, dict) else ():
                    if self._own(node, str(rank)):
                        self.missing[str(rank)] = str(why)[:500]
                self.done.add(node)
                self.cond.notify_all()
                return
            rank, data = str(msg.get("rank")), msg.get("data")
            if (
                not rank.isdigit()
                or not isinstance(data, str)
                or msg.get("i") != len(self.parts.get(rank, ()))
            ):
                return  # out of order, or not a piece: that rank's trace is left incomplete
            if not self._own(node, rank):
                return
            self.size += len(data)
            if self.size > GATHER_MAX:
                self.missing[rank] = "its trace was more than the hub takes"
                self.parts.pop(rank, None)
                return
            self.parts.setdefault(rank, []).append(data)
            self.count[rank] = msg.get("n")

    def refused(self) -> Dict[int, List[int]]:
        """{node: the ranks not its own it sent}, for the nodes that did."""
        with self.cond:
            return {k: sorted(map(int, r)) for k, r in sorted(self.foreign.items()) if r}

    def _own(self, node: int, rank: str) -> bool:
        if self.owners.get(rank) == node:
            return True
        if len(self.foreign.setdefault(node, set())) < 1000:  # enough to name it by
            self.foreign[node].add(rank)
        return False

    def wait(self, timeout: float) -> Tuple[Dict[str, Any], Dict[str, str]]:
        """({rank: trace}, {rank: why none}) once every node is done, or at the deadline;
        unpacked in rank order while they come to UNPACKED_MAX in all, the rest named."""
        deadline = time.monotonic() + timeout
        with self.cond:
            self.cond.wait_for(lambda: len(self.done) >= self.nodes,
                               max(0.0, deadline - time.monotonic()))  # fmt: skip
            parts, count, missing = dict(self.parts), dict(self.count), dict(self.missing)
        from .stacks import TRACE_MAX

        traces = {}
        room = UNPACKED_MAX
        for rank in sorted(parts, key=int):
            got = parts[rank]
            if len(got) != count.get(rank):
                missing[rank] = "its trace came only in part"
                continue
            most = min(TRACE_MAX, room)
            try:
                data = unpacked(base64.b64decode("".join(got)), most)
                if data is not None:
                    traces[rank] = json.loads(data)
                    room -= len(data)
                    continue
            except (ValueError, zlib.error) as exc:
                missing[rank] = "its trace could not be read: {}".format(exc)
                continue
            if most < TRACE_MAX:  # said: a verdict on the others is on part of the run
                missing[rank] = LEFT_OUT + "the traces came to more than {} MiB unpacked".format(
                    UNPACKED_MAX >> 20)  # fmt: skip
            else:
                missing[rank] = "its trace was more than {} MiB unpacked".format(TRACE_MAX >> 20)
        return traces, missing


def unpacked(packed: bytes, most: int) -> Optional[bytes]:
    """`packed` (zlib) unpacked, or None where it is more than `most` bytes: never more is
    made, whatever the data claims."""
    if most < 1:  # 0 would be no bound at all
        return None
    unpack = zlib.decompressobj()
    data = unpack.decompress(packed, most)
    if unpack.eof:
        return data
    if unpack.unconsumed_tail or unpack.decompress(b"", 1):
        return None
    raise ValueError("cut short")


def keep(
    where: str,
    attempt: int,
    traces: Dict[str, Any],
    missing: Dict[str, str],
    refused: Optional[Dict[str, List[int]]] = None,
) -> Dict[str, Any]:
    """The traces in `where`/flight-ATTEMPT/ (JSON, one a rank) with torch's verdict on them
    (analysis.txt); what the hang's record says of them: {dir, ranks, missing, verdict,
    missing_ranks, refused}. refused: {host: ranks not its own it sent}."""
    from . import stacks

    folder = os.path.join(where, FOLDER + str(attempt))
    os.makedirs(folder, 0o700, exist_ok=True)
    for rank, trace in traces.items():
        _write(os.path.join(folder, "{}{}.json".format(TRACE, int(rank))), json.dumps(trace))
    said = None
    if traces:
        got = stacks.verdict(traces, folder, VERDICT_S)
        said = clean(got["verdict"]) if "verdict" in got else got["error"]  # no verdict in N s
        _write(os.path.join(folder, VERDICT), said + "\n")
    return {
        "dir": folder,
        "ranks": sorted(int(r) for r in traces),
        "missing": {r: missing[r] for r in sorted(missing, key=int)},
        "verdict": said,
        "missing_ranks": missing_ranks(said or ""),
        "refused": dict(refused or {}),
    }


def clean(text: str) -> str:
    """The analyser's findings, less its noise."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(_NOISE)]
    return "\n".join(lines) or "the analyser found nothing wrong"


def missing_ranks(verdict: str) -> List[int]:
    """The ranks the analyser found missing from a collective the others joined."""
    found: Set[int] = set()
    for match in _MISSING.finditer(verdict):
        found.update(int(r) for r in match.group(1).replace(" ", "").split(",") if r)
    return sorted(found)


def summary(kept: Dict[str, Any]) -> str:
    """The hang's word on the traces: how many, who the verdict says is missing, and which
    host sent traces of ranks not its own."""
    if not kept["ranks"]:
        whys = sorted(set(kept["missing"].values()))
        out = "no flight recorder trace" + (" ({})".format(whys[0]) if whys else "")
    else:
        out = "flight recorder: {} trace(s) kept in {}".format(len(kept["ranks"]), kept["dir"])
    if kept["ranks"] and kept["missing_ranks"]:
        out += "; its verdict: rank(s) {} missing from a collective".format(
            ",".join(map(str, kept["missing_ranks"]))
        )
    left = [why for why in kept["missing"].values() if why.startswith(LEFT_OUT)]
    if kept["ranks"] and left:
        out += "; {} more {}".format(len(left), left[0])
    for host, ranks in sorted((kept.get("refused") or {}).items()):
        out += "; {} sent traces of ranks not its own ({}): refused".format(host, _ranks(ranks))
    return out


def _ranks(ranks: List[int]) -> str:
    shown = ",".join(map(str, ranks[:8]))
    return shown + (" and {} more".format(len(ranks) - 8) if len(ranks) > 8 else "")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
