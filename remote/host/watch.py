"""The run's hang watch, on node 0's supervisor (the hub), with or without a launcher attached:
every few seconds it asks every node for a sample of its ranks (remote/host/vitals.py; their
stacks too once the rule wants them), feeds the hang rule (remote/host/hangrule.py) and, at a
hang, hands it on (`on_hang`) with every rank's last sample and host.

A node that does not answer in time is left out of that sample: its ranks count as moving, so a
slow or lost node can delay a verdict but never make one (the hub's own watch loses it).
python3 >= 3.8, stdlib only.
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import contextlib
import json
import os
import re
import threading
import time

from . import flightfiles, hangtraces, protocol, state
from .hangrule import HangRule
from .policy import spares_left
from .straggle import Stragglers

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional

    from .stacks import Analyser

POLL_S = 5.0  # between two asks
ANSWER_S = 10.0  # how long one ask's answers are waited for (py-spy reads a few ranks)
KEPT_MAX = 6 << 20  # bytes of kept hangs a launcher fetches: one answer (wire.FRAME_MAX), escaped
_HANG = re.compile(r"hang-[0-9]+\.json\Z")  # what keep() writes
_FLIGHT = re.compile(flightfiles.FOLDER + r"[0-9]+\Z")  # what hangtraces.keep() writes, in it:
_TRACE = re.compile(
    "({}[0-9]+\\.json|{})\\Z".format(flightfiles.TRACE, re.escape(flightfiles.VERDICT))
)


class HangWatch:
    """ask(seq, stacks): asks every node (node 0's own supervisor too); each answers through
    `answer(node, seq, sample)`. on_hang(hang, ranks, hosts) runs in the watch's thread."""

    def __init__(
        self,
        names: List[str],
        hang_after: Optional[float],
        ask: Callable[[int, bool], None],
        on_hang: Callable[[Any, Dict[int, Any], Dict[int, str]], None],
        clock: Callable[[], float] = time.monotonic,
        poll: float = POLL_S,
        on_straggler: Optional[Callable[[Any, Dict[int, str]], None]] = None,
    ) -> None:
        self.names, self.ask, self.on_hang, self.clock = names, ask, on_hang, clock
        self.on_straggler = on_straggler  # ((rank, how much slower), hosts)
        self.rule = HangRule(hang_after)
        self.stragglers = Stragglers()
        self.poll = poll
        self.cond = threading.Condition()
        self.seq = 0
        self.answers: Dict[int, Any] = {}  # node -> its sample for self.seq
        self.quiet: Optional[float] = None  # the job's silence, as of the last answers
        self.heard = 0.0  # when they came
        self.stopped = threading.Event()

    def answer(self, node: int, seq: Any, sample: Any) -> None:
        if not isinstance(sample, dict) or not isinstance(sample.get("ranks"), dict):
            return
        with self.cond:
            if seq == self.seq and 0 <= node < len(self.names):
                self.answers[node] = sample
                self.cond.notify_all()

    def stop(self) -> None:
        self.stopped.set()
        with self.cond:
            self.cond.notify_all()

    def run(self) -> None:
        """Until stop(): one attempt's watch (a new attempt gets a new HangWatch)."""
        while not self.stopped.is_set():
            self.step()
            self.stopped.wait(self.poll)

    def step(self) -> None:
        """One ask, its answers, and the rule fed when it asked for stacks."""
        now = self.clock()
        stacks = self.rule.due(now, None if self.quiet is None else self.quiet + now - self.heard)
        with self.cond:
            self.seq += 1
            self.answers, seq = {}, self.seq
        self.ask(seq, stacks)
        deadline = self.clock() + ANSWER_S
        with self.cond:
            self.cond.wait_for(
                lambda: len(self.answers) == len(self.names) or self.stopped.is_set(),
                max(0.0, deadline - self.clock()),
            )
            answers = dict(self.answers)
        if not answers or self.stopped.is_set():
            return
        ranks, hosts, quiet = merge(answers, self.names)
        self.quiet = quiet if len(answers) == len(self.names) else None
        self.heard = self.clock()
        if self.on_straggler is not None and ranks and len(answers) == len(self.names):
            found = self.stragglers.feed(self.heard, ranks)
            if found is not None:
                self.on_straggler(found, hosts)
        if stacks and quiet is not None:
            hang = self.rule.feed(self.clock(), quiet, ranks)
            if hang is not None:
                self.on_hang(hang, ranks, hosts)


class Guard:
    """Node 0's side: a HangWatch over each attempt, and what a hang does. hub: the run's Hub;
    node: node 0's own vitals.Node; word(event, status, message): the daemon's (the stream,
    the console, job.notify)."""

    THEN = {"restart": "the attempt ends", "stop": "the run stops",
            "warn": "left running (job.on_hang: warn)"}  # fmt: skip

    def __init__(self, hub: Any, spec: protocol.Spec, where: str, node: Any, word: Any) -> None:
        self.hub, self.spec, self.where, self.node, self.word = hub, spec, where, node, word
        self.last: Any = None  # (attempt, the culprits' hosts) of the last hang
        self.asked = 0  # flight recorder asks, for their seq

    def start(self, attempt: int) -> Optional[HangWatch]:
        """The attempt's watch, running; None where job.hang_after is off."""
        if self.spec["hang_after"] is None:
            return None

        def ask(seq: int, stacks: bool) -> None:
            self.hub.ask(seq, stacks)
            _thread(lambda: watch.answer(0, seq, self.node.sample(stacks)))

        watch = HangWatch(self.spec["names"], self.spec["hang_after"], ask,
                      lambda *found: self.hung(attempt, *found),
                      on_straggler=lambda *found: self.straggler(attempt, *found))  # fmt: skip
        self.hub.sampled = watch.answer
        _thread(watch.run)
        return watch

    def straggler(self, attempt: int, found: Any, hosts: Dict[int, str]) -> None:
        """A rank slower than the rest: word of it, then job.on_straggler: replace swaps its
        host for a spare, at once where a spare and a restart are left, else after the
        attempt (policy.Policy.swap); warn only says it."""
        rank, slower = found
        host = hosts.get(rank, "?")
        said = ("rank {} on {} is a straggler: it waits least in the collectives, and the job "
                "runs about {:.0f} % slower for it").format(rank, host, 100 * slower)  # fmt: skip
        names = self.spec["names"]
        node = names.index(host) if host in names else None
        then = ""
        if self.spec["on_straggler"] == "replace" and node == 0:
            then = "; node 0's host runs the hub: not replaced"
        elif self.spec["on_straggler"] == "replace" and node is not None:
            now = spares_left(self.spec, self.hub) > 0 and attempt < self.spec["restarts"]
            then = "; a spare takes its place " + ("now" if now else "at the next restart")
            if not now:
                self.hub.replace_later(node, said)
        self.word("straggler", "running", said + then)
        if then.endswith(" now"):
            self.hub.fail("straggler: " + said, node, bad=True, cause="straggler")

    def hung(self, attempt: int, hang: Any, ranks: Dict[int, Any], hosts: Dict[int, str]) -> None:
        """Every rank's stack kept (and the flight recorder's traces and verdict, where it is
        on), word of the hang, then job.on_hang: the attempt fails as hung (restart), the run
        ends (stop), or only the word (warn). The same hosts to blame in two attempts in a row:
        said as a bad host. Where no stack names a culprit, the verdict's missing rank is it."""
        action = self.spec["on_hang"]
        flight = self.flight(attempt, hosts) if hangtraces.wanted(self.spec) else None
        if flight is not None and not hang.culprits:
            hang.culprits = [r for r in flight["missing_ranks"] if r in hosts]
        try:
            kept = "every rank's stack kept in " + keep(self.where, attempt, hang, ranks, hosts,
                                                        flight)  # fmt: skip
        except OSError as exc:
            kept = "the stacks could not be kept: {}".format(exc)
        if flight is not None:
            kept += "; " + hangtraces.summary(flight)
        culprits = sorted({hosts[r] for r in hang.culprits if r in hosts})
        twice = bool(culprits) and self.last == (attempt - 1, culprits)
        if twice:
            kept += "; {} hung twice in a row: a bad host".format(", ".join(culprits))
        self.last = (attempt, culprits)
        self.word("hang", "running", "{}; {}; {}".format(hang.text(hosts), kept, self.THEN[action]))
        if action != "warn":
            names = self.spec["names"]
            node = names.index(culprits[0]) if culprits and culprits[0] in names else None
            self.hub.fail("hung: " + hang.text(hosts), node, final=action == "stop", bad=twice)

    def flight(self, attempt: int, hosts: Dict[int, str]) -> Optional[Dict[str, Any]]:
        """Every node's ranks' flight recorder traces, sent here in pieces, kept in
        flight-ATTEMPT/ with the analyser's verdict (remote/host/hangtraces.py); None where
        they could not be kept. hosts: {rank: host}, as the hang's samples found them: a
        node's traces of a rank on another node are refused, and the node named."""
        self.asked += 1
        names = self.spec["names"]
        node_of = {name: k for k, name in enumerate(names)}
        owners = {str(r): node_of[h] for r, h in hosts.items() if h in node_of}
        gather = hangtraces.Gather("{}.{}".format(attempt, self.asked), len(names), owners)
        try:
            analyser = hangtraces.start_analyser()  # torch imported while the ranks dump
        except OSError:
            analyser = None
        try:
            return self._gathered(attempt, gather, analyser)
        except (OSError, ValueError):
            return None
        finally:  # keep() stops it; anything raised before must not leave it waiting
            if analyser is not None:
                analyser.close()

    def _gathered(
        self, attempt: int, gather: hangtraces.Gather, analyser: Optional[Analyser]
    ) -> Optional[Dict[str, Any]]:
        self.hub.traced = gather.add
        self.hub.ask_flight(gather.seq)
        try:
            own = self.node.traces()
        except Exception:  # node 0's own dump gone wrong: the others' still count
            own = {}
        for piece in hangtraces.pieces(gather.seq, own):
            gather.add(0, piece)
        traces, missing = gather.wait(hangtraces.ANSWER_S)
        names = self.spec["names"]
        refused = {names[k]: ranks for k, ranks in gather.refused().items()}
        return hangtraces.keep(self.where, attempt, traces, missing, refused, analyser)


def _thread(fn: Callable[..., Any]) -> None:
    threading.Thread(target=fn, daemon=True).start()


def merge(answers: Dict[int, Any], names: List[str]) -> Any:
    """Every node's answer as one: ({rank: sample}, {rank: host}, the job's silence: the
    shortest of the nodes'; None if a node has not started its job)."""
    ranks: Dict[int, Any] = {}
    hosts: Dict[int, str] = {}
    quiets = []
    for node, sample in answers.items():
        quiets.append(sample.get("quiet"))
        for rank, got in sample["ranks"].items():
            try:
                ranks[int(rank)] = got
                hosts[int(rank)] = names[node]
            except ValueError:
                continue
    known = [q for q in quiets if isinstance(q, (int, float))]
    quiet = min(known) if known and len(known) == len(quiets) else None
    return ranks, hosts, quiet


def keep(
    where: str,
    attempt: int,
    hang: Any,
    ranks: Dict[int, Any],
    hosts: Dict[int, str],
    flight: Optional[Dict[str, Any]] = None,
) -> str:
    """Every rank's last sample (stack, CPU, I/O) and the verdict (the flight recorder's too,
    where it is on), as hang-ATTEMPT.json in the node's directory (node 0's: an attach or
    `ddptui stacks` reads it there); its path."""
    path = os.path.join(where, "hang-{}.json".format(attempt))
    found = {
        "text": hang.text(hosts),
        "culprits": hang.culprits,
        "waiting": hang.waiting,
        "silent_s": round(hang.silent_s, 1),
        "ranks": {str(r): dict(ranks[r], host=hosts.get(r)) for r in sorted(ranks)},
    }
    if flight is not None:
        found["flight_recorder"] = flight
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(found, f, indent=1)
    os.replace(tmp, path)
    return path


def kept(req: Dict[str, Any]) -> Dict[str, Any]:
    """What node 0's watch kept at the hangs of run `run_id` ({run_id, since}): {records: {name:
    its text}}: each hang-ATTEMPT.json, and the flight recorder's flight-ATTEMPT/ files, for
    a launcher to copy into its run directory; at most KEPT_MAX bytes in all, the hangs first."""
    where = state.node_dir(str(req["run_id"]), 0, int(req.get("since") or 0))
    try:
        found = os.listdir(where)
    except OSError:
        found = []
    names = sorted(n for n in found if _HANG.match(n))
    for folder in sorted(n for n in found if _FLIGHT.match(n)):
        with contextlib.suppress(OSError):
            names += sorted(folder + "/" + n for n in os.listdir(os.path.join(where, folder))
                            if _TRACE.match(n))  # fmt: skip
    records, room = {}, KEPT_MAX
    for name in names:
        try:
            with open(os.path.join(where, name), "rb") as f:
                text = f.read(room + 1)
        except OSError:
            continue
        if len(text) <= room:
            records[name] = text.decode("utf-8", "replace")
            room -= len(text)
    return {"records": records}
