"""The training's progress, host side: progress, metrics and links parsed from a job's lines.

Recognised on their own: tqdm bars (`45%|████ | 450/1000 [01:02<01:18, 7.20it/s, loss=0.41]`,
as Lightning and Hugging Face print them, redrawn with `\\r`), Hugging Face Trainer's log dicts
(`{'loss': 0.41, 'learning_rate': 2e-05, 'epoch': 0.5}`), `key=value` / `key: value` /
`key value` pairs after a step or iteration number (`step 1200/5000 loss 0.41`), and the links
trackers print (W&B, TensorBoard, MLflow, Comet, Aim). `job.progress`, a regex with named groups
(`step`, `total`, any metric), is tried first on every line.

This sits on the lines' path (the launcher's relay, node 0's supervisor): a chunk of lines
costs one regex scan in C when none of them looks like progress, and only the lines that do
are parsed. Both ends use it: the launcher as `remote.host.progress`, node 0's supervisor as
`ddph.progress` (python3 >= 3.8, standard library only).

A job's text is anything (a line may be 256 KiB of one character), and `re` holds the GIL while
it matches: a pattern that backtracks stops every other thread of the process (node 0's hub and
heartbeats, the launcher's event loop). So no pattern here can: each starts only where a word or
a number does (a lookbehind), and wherever two quantifiers meet, their characters differ. And
only a line's head and tail are read (LOOK each): parsing costs the same per line however long.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time

from . import ranktag

TYPE_CHECKING = False  # typing's names cost import time on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Callable

# A line worth parsing holds one of these (it/s, step, iter, epoch, a dict, a link); most lines
# of a job hold none. Each alternative starts with a character rare in text, so the scan in C
# seldom stops to try one.
HINT = re.compile(r"/s|/it|te[pr]|TE[PR]|poch|POCH|\{'|:/")
# The launcher's and the supervisor's tag: `[3]:text`; a node's own lines have none.

LOOK = 4096  # characters of a line's head, and of its tail, that are parsed

# A number: its digits after a dot only where there is one (`\d+\.?\d*` splits a run of digits
# in as many ways as it is long).
_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
# tqdm's bar, with or without a total, its numbers read where a number starts; the postfix
# (Lightning's `loss=0.41`) after the rate, with no `[` (each bar's brackets are its own).
_TQDM = re.compile(
    r"(?<![\d.])(?:(\d{1,3})%\|[^|\n]*\|\s*)?(?<![\d.])(\d+)(?:/(\d+))?(?:it)? "
    r"\[[0-9:]+(?:<[0-9:?]+)?,\s*(?:(\d+(?:\.\d+)?)(it/s|s/it)|\?(?:it/s|s/it))([^\]\[\r]*)\]"
)
# Lightning's rich bar: `Epoch 1/2  ━━━━━━━━━━ 20/20 0:00:00 • 0:00:00 438.86it/s loss: 0.41`
# (its spaces and bar in one class, a space before the count).
_RICH = re.compile(
    r"^Epoch (\d+)/(\d+) [━╸╺ ]+(?<= )(\d+)/(\d+) [0-9:]+ • [0-9:-]+ (\d+(?:\.\d+)?)it/s(.*)$"
)
_ASIDE = re.compile(r"(?i)valid|test|eval|sanity|predict")
_EPOCH = re.compile(r"^\s*Epoch (\d+)\b")
# Hugging Face Trainer: a Python dict of numbers (a value may be wrapped: np.float64(0.41)).
_HF_PAIR = re.compile(r"'([A-Za-z_][\w./-]*)':\s*(?:[\w.]+\()?(" + _NUM + r")\b")
_STEP = re.compile(
    r"\b(?:global[_ ]step|step|iter(?:ation)?)s?\b[\s:=#\[(]*(\d+)(?:\s*/\s*(\d+))?",
    re.IGNORECASE,
)
# A loop that says only its epochs (`epoch 3: loss 0.41`): the epoch is its step.
_EPOCH_STEP = re.compile(r"\bepoch\b[\s:=#\[(]*(\d+)(?:\s*/\s*(\d+))?", re.IGNORECASE)
# After the step: `loss=0.41`, `loss: 0.41`, `loss 0.41`; a number with a unit (3s) is no value.
_PAIR = re.compile(
    r"(?<![\w./-])([A-Za-z_][\w./-]*)(?:\s*[=:]\s*|\s+)(" + _NUM + r")(?![\w.%])"
)  # a key only where a word starts
_NOT_METRICS = frozenset(("step", "steps", "iter", "iters", "iteration", "of", "global_step"))
# Trackers' links, as they print them: (tracker, regex with the name and the url).
_SGR = re.compile(r"\x1b\[[0-9;]*m")
_URL = r"(https?://[^\s'\"<>\x00-\x1f\x7f-\x9f]+)"  # no control character in a link
_NAME = r"([^\s\x00-\x1f\x7f-\x9f]+)"
_LINKS = (
    ("W&B", re.compile(r"^wandb: .*View run(?: " + _NAME + ")? at:? " + _URL)),
    ("MLflow", re.compile(r"^\U0001f3c3 View run(?: " + _NAME + ")? at:? " + _URL)),
    ("TensorBoard", re.compile(r"^(?:\S+ )?TensorBoard( \S+)? at " + _URL)),
    ("Comet", re.compile(r"^COMET INFO:(?: .*live on comet\.com| +url\s*:)() ?" + _URL)),
    ("Aim", re.compile(r"^Open() " + _URL + r"\s*$")),
)


def _number(text):
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


class Parser:
    """One line's progress: (step, total, rate, metrics, link), or None.

    rate: steps per second where the line says it (tqdm); link: (tracker, name, url)."""

    def __init__(self, pattern=None):
        # job.progress, checked by the inventory; MULTILINE so ^ and $ hold per line.
        self.user = re.compile(pattern, re.MULTILINE) if pattern else None

    def hinted(self, chunk):
        """Whether any line of `chunk` (str) may say progress: one scan in C. The user's own
        pattern sees no more of a line than `parse` gives it: a chunk longer than a line's
        bounded part is parsed line by line."""
        return HINT.search(chunk) is not None or (
            self.user is not None and (len(chunk) > 2 * LOOK or self.user.search(chunk) is not None)
        )

    def parse(self, line):
        if len(line) > 2 * LOOK:  # its head, then its tail; a bar redrawn: its tail first
            head, tail = line[:LOOK], line[-LOOK:]
            first, then = (tail, head) if "\r" in line[LOOK:] else (head, tail)
            found = self.parse(first)
            return found if found is not None else self.parse(then)
        if "\x1b" in line:  # W&B colours its words even into a file
            line = _SGR.sub("", line)
        if "\r" in line.rstrip("\r"):
            return self._redrawn(line)
        return self._parse(line)

    def _redrawn(self, line):
        """A line redrawn with \r: what shows last (a Trainer dict tqdm.write put over its
        bar), with the step of the last bar drawn before it."""
        shown = next((p for p in reversed(line.split("\r")) if p.strip()), "")
        found = self._parse(shown)
        if found is not None and found[0] is not None:
            return found
        bar = _tqdm(line) if ("it/s" in line or "s/it" in line) else None
        if bar is None:
            return found
        if found is None:
            return bar
        return (*bar[:3], {**bar[3], **found[3]}, found[4])

    def _parse(self, line):
        found = self._user(line) if self.user is not None else None
        if found is not None:
            return found
        if "://" in line:
            link = _link(line)
            if link is not None:
                return (None, None, None, {}, link)
        if "it/s" in line or "s/it" in line:
            found = _tqdm(line)
            if found is not None:
                return found
        stripped = line.strip()
        if stripped.startswith("{'") and stripped.endswith("}"):
            metrics = {k: v for k, v in _pairs(_HF_PAIR, stripped)}
            return (None, None, None, metrics, None) if metrics else None
        return _stepped(line)

    def _user(self, line):
        m = self.user.search(line) if self.user is not None else None
        if m is None:
            return None
        groups = {k: v for k, v in m.groupdict().items() if v is not None}
        step, total = _int(groups.pop("step", None)), _int(groups.pop("total", None))
        metrics = {k: v for k, v in ((k, _number(v)) for k, v in groups.items()) if v is not None}
        if step is None and not metrics:
            return None
        return (step, total, None, metrics, None)


def _int(text):
    value = _number(text) if text is not None else None
    return int(value) if value is not None else None


def _pairs(regex, text):
    for key, raw in regex.findall(text):
        value = _number(raw)
        if value is not None and len(key) <= 100 and key.lower() not in _NOT_METRICS:
            yield key, value


def _tqdm(line):
    last = None
    for match in _TQDM.finditer(line):  # redrawn with \r: the last drawing is the news
        last = match
    if last is None:
        return _rich(line)
    label = line[: last.start()].rpartition("\r")[2]
    if _ASIDE.search(label):  # Lightning's validation bar, an eval loop: not the training's steps
        return None
    _, n, total, rate, unit, post = last.groups()
    speed = None
    if rate:
        speed = float(rate) if unit == "it/s" else (1 / float(rate) if float(rate) else None)
    metrics = dict(_pairs(_PAIR, post.replace(",", " ")))
    step, total = int(n), int(total) if total else None
    epoch = _EPOCH.search(label)
    if epoch is not None and total:  # Lightning's bar starts again each epoch: count on
        step += int(epoch.group(1)) * total
        total = None  # the epochs to come are not said
    return (step, total, speed, metrics, None)


def _rich(line):
    m = _RICH.search(line.rpartition("\r")[2])
    if m is None:
        return None
    epoch, last_epoch, n, per, rate, post = m.groups()
    step, per = int(epoch) * int(per) + int(n), int(per)
    metrics = dict(_pairs(_PAIR, post))
    return (step, (int(last_epoch) + 1) * per, float(rate), metrics, None)


def _stepped(line):
    m = _STEP.search(line) or _EPOCH_STEP.search(line)
    if m is None:
        return None
    total = int(m.group(2)) if m.group(2) else None
    metrics = dict(_pairs(_PAIR, line[m.end() :]))
    if total is None and not metrics:  # `step 3 of the setup failed`: not a training step
        return None
    if total is not None and total < int(m.group(1)):
        return None
    return (int(m.group(1)), total, None, metrics, None)


def _link(line):
    for tracker, regex in _LINKS:
        m = regex.search(line)
        if m is not None:
            name = (m.group(1) or "").strip()[:NAME_MAX] or None
            url = m.group(2).rstrip(".,;)")
            return (tracker, name, url) if len(url) <= URL_MAX else None
    return None


# -- what a run's lines said, kept -------------------------------------------------------------

# Lines a second read in full (a run's steps and metrics, even at thousands of ranks); past
# that, a flood: its news now and then, so the relay's lines hardly pay for it.
READ_LINES = 4096
SERIES_MAX = 400  # points kept per metric, evenly thinned over the whole run
# Trackers' links: the first LINKS_MAX kept, each once; a longer url is no tracker's. Together
# they stay far below the kernel's 128 KiB for one string (job.notify's DDPTUI_LINKS).
LINKS_MAX = 32
URL_MAX = 1024
NAME_MAX = 200
METRICS_MAX = 100  # metrics a run keeps a curve of: the first so many named
METRIC = re.compile(r"[A-Za-z_][\w./-]{0,99}\Z")  # a metric's name, as the forms read one
RATE_WINDOW_S = 30.0  # steps/s from the steps seen over about this long, where no bar says it


class Rank:
    """One rank's last word: step, total, speed, metrics."""

    __slots__ = ("mark", "metrics", "rate", "seen", "step", "total")

    def __init__(self):
        self.step = self.total = self.rate = None
        self.metrics = {}
        self.seen = 0.0  # when its last progress came
        self.mark = None  # (time, step) a while ago: the speed where no bar says it

    def note(self, step, total, rate, metrics, at):
        if step is not None:
            if self.step is not None and step < self.step:  # started over (a new attempt)
                self.mark = None
            self.step = step
            if total is not None:
                self.total = total
            if rate is not None:
                self.rate = rate
            elif self.mark is None or at - self.mark[0] > 2 * RATE_WINDOW_S:
                self.mark = (at, step)
            elif at - self.mark[0] >= 1.0:
                self.rate = (step - self.mark[1]) / (at - self.mark[0])
                if at - self.mark[0] > RATE_WINDOW_S:
                    self.mark = (at, step)
        self.metrics.update(metrics)
        self.seen = at


class Series:
    """A metric's points (step, value, attempt), at most SERIES_MAX: when full, every other
    point goes and only every other new one is kept (the stride doubles), so the points stay
    spread evenly over the whole run however long it is."""

    __slots__ = ("count", "points", "stride")

    def __init__(self, points=None, stride=1, count=0):
        self.points = points or []
        self.stride, self.count = stride, count

    def add(self, step, value, attempt):
        self.count += 1
        if (self.count - 1) % self.stride:
            self.points[-1] = [step, value, attempt]  # the newest stays: the curve's end
            return
        self.points.append([step, value, attempt])
        if len(self.points) > SERIES_MAX:
            self.points = self.points[::2]
            self.stride *= 2


class Tracker:
    """Every rank's progress, the run's series and the trackers' links, fed whole lines."""

    def __init__(self, pattern: str | bool | None = None) -> None:
        self.parser = Parser(pattern)
        self.ranks: dict[int, Rank] = {}  # rank -> Rank
        # metric -> Series: the metric's first rank (normally rank 0)
        self.series: dict[str, Series] = {}
        self.owner: dict[str, int] = {}  # metric -> the rank whose values the series holds
        # rank -> metric logs without a step seen (a step of their own)
        self.logs: dict[int, int] = {}
        self.links: dict[str, list[Any]] = {}  # url -> [tracker, name, rank]
        # [attempt, first step seen, time] as each attempt began
        self.attempts: list[list[Any]] = []
        self.attempt: int | None = None
        self.changed = False  # something new since the last `take`
        self.window = 0.0  # when this second of reading ends
        self.read = 0  # lines read in this second
        # source -> its last chunk unread (text, attempt, at), in a flood
        self.pending: dict[Any, tuple[str, int, float | None]] = {}

    def feed_bytes(self, data: bytes, attempt: int, at: float | None = None) -> None:
        """A chunk of whole tagged lines as spooled (node 0's supervisor)."""
        self.feed_text(data.decode("utf-8", "replace"), attempt, at, data.count(b"\n"))

    def feed_text(
        self, text: str, attempt: int, at: float | None = None, lines: int | None = None,
        source: Any = 0,
    ) -> None:  # fmt: skip
        """A chunk of whole tagged lines from `source` (a node). Up to READ_LINES lines a
        second are all read; past that (a flood), each source's last chunk is kept for
        `flush` (once a second) to read: its links, and its last line (the news). A link
        printed amid a flood is caught only so (W&B says its link again as its run ends)."""
        now = time.monotonic()
        if now >= self.window:
            self.window, self.read = now + 1.0, 0
        if self.read < READ_LINES:
            self.read += text.count("\n") if lines is None else lines
            self._lines(text, attempt, at)
            return
        self.pending[source] = (text, attempt, at)

    def flush(self) -> None:
        """Read the last chunk a flood left unread, of each source: its links, its last line."""
        pending, self.pending = self.pending, {}
        for text, attempt, at in pending.values():
            if "://" in text:
                self._lines("\n".join(x for x in text.split("\n") if "://" in x), attempt, at)
            self._lines(text[text.rfind("\n", 0, len(text) - 1) + 1 :], attempt, at)

    def _lines(self, text, attempt, at):
        if not self.parser.hinted(text):
            return
        for rank, line in ranktag.untag(text):
            if rank is not None:
                self.feed(rank, line, attempt, at)

    def feed(self, rank, line, attempt, at=None):
        """One line of `rank`'s (hinted or not: parsed here)."""
        found = self.parser.parse(line)
        if found is None:
            return
        at = time.time() if at is None else at
        step, total, rate, metrics, link = found
        if link is not None:
            if link[2] not in self.links and len(self.links) < LINKS_MAX:
                self.links[link[2]] = [link[0], link[1], rank]
                self.changed = True
            return
        if self.attempt is None or attempt > self.attempt:  # nodes' streams interleave: a
            self.attempt = attempt  # late line of the last attempt starts none again
            self.attempts.append([attempt, step, at])
        elif attempt == self.attempt and self.attempts[-1][1] is None and step is not None:
            self.attempts[-1][1] = step
        if len(self.series) + len(metrics) > METRICS_MAX:  # only the metrics a curve is kept of
            room = max(0, METRICS_MAX - len(self.series))
            new = set([k for k in metrics if k not in self.series][:room])
            metrics = {k: v for k, v in metrics.items() if k in self.series or k in new}
        state = self.ranks.get(rank)
        if state is None:
            state = self.ranks[rank] = Rank()
        if step is None and metrics:  # a Trainer dict: at the rank's last step, else counted
            step = state.step
            if step is None:
                step = self.logs[rank] = self.logs.get(rank, 0) + 1
            state.note(None, None, None, metrics, at)
        else:
            state.note(step, total, rate, metrics, at)
        for key, value in metrics.items():
            owner = self.owner.get(key)
            if owner is None or rank < owner:
                self.owner[key], self.series[key] = rank, Series()
            elif rank != owner:
                continue
            self.series[key].add(step, value, attempt)
        self.changed = True

    def seed(self, dump: Any) -> bool:
        """Go on from a series file (node 0's host's, for an attach whose replay comes faster
        than it is read): True if it held a curve. What a host sends is checked first."""
        try:
            series = {
                str(k): [[float(s), float(v), int(a)] for s, v, a in points][-SERIES_MAX:]
                for k, points in list((dump.get("metrics") or {}).items())[:METRICS_MAX]
                if METRIC.match(str(k))
            }
            attempts = [[int(a["attempt"]), a.get("step"), float(a["at"])]
                        for a in dump.get("attempts") or ()]  # fmt: skip
            links = {str(x["url"]): [str(x["tracker"]), x.get("name"), x.get("rank")]
                     for x in (dump.get("links") or ())[:LINKS_MAX]
                     if len(str(x["url"])) <= URL_MAX}  # fmt: skip
            last = dump.get("last") or {}
            step, total, rate = last.get("step"), last.get("total"), last.get("rate")
            metrics = {str(k): float(v) for k, v in (last.get("metrics") or {}).items()
                       if str(k) in series}  # fmt: skip
        except (AttributeError, KeyError, TypeError, ValueError):
            return False
        if not series:
            return False
        for key, points in series.items():
            self.series[key], self.owner[key] = Series(points, 1, len(points)), 0
        self.attempts = attempts
        self.links = dict(list({**links, **self.links}.items())[:LINKS_MAX])
        self.attempt = attempts[-1][0] if attempts else None
        lead = self.ranks[0] = Rank()
        lead.step = int(step) if isinstance(step, (int, float)) else None
        lead.total = int(total) if isinstance(total, (int, float)) else None
        lead.rate = float(rate) if isinstance(rate, (int, float)) else None
        lead.metrics = metrics
        self.changed = True
        return True

    # -- the run's view ------------------------------------------------------------------------

    def lead(self):
        """The rank the run's step is read from: the lowest with a step."""
        stepped = [r for r, s in self.ranks.items() if s.step is not None]
        return self.ranks[min(stepped)] if stepped else None

    def last(self) -> dict[str, Any]:
        """The run's last values: step, total, rate, seconds left, metrics (the owners')."""
        lead = self.lead()
        metrics = {}
        for key, rank in sorted(self.owner.items()):
            state = self.ranks.get(rank)
            if state is not None and key in state.metrics:
                metrics[key] = state.metrics[key]
        out: dict[str, Any] = {"step": None, "total": None, "rate": None, "left": None,
                               "metrics": metrics}  # fmt: skip
        if lead is not None:
            out.update(step=lead.step, total=lead.total, rate=lead.rate)
            if lead.total and lead.rate and lead.step is not None:
                out["left"] = max(0.0, (lead.total - lead.step) / lead.rate)
        out["attempt"] = self.attempt
        return out

    def link_list(self) -> list[dict[str, Any]]:
        return [
            {"tracker": t, "name": name, "url": url, "rank": rank}
            for url, (t, name, rank) in self.links.items()
        ]

    def dump(self) -> dict[str, Any]:
        """The series file: each metric's points, each attempt's start, the last values."""
        return {
            "metrics": {k: s.points for k, s in sorted(self.series.items())},
            "attempts": [{"attempt": a, "step": s, "at": t} for a, s, t in self.attempts],
            "last": self.last(),
            "links": self.link_list(),
        }


SERIES = "series.json"
WRITE_EVERY_S = 10.0


class Keeper:
    """Node 0's supervisor: its own ranks' lines parsed as they are spooled, the curve kept in
    its node directory (series.json), so a detached run's `runs` and `ddptui plot` have it
    from the host. Fed from the job's reader threads: one at a time."""

    def __init__(
        self, pattern: str | bool | None, ndir: str,
        on_link: Callable[[list[str]], None] | None = None,
    ) -> None:  # fmt: skip
        self.tracker = Tracker(pattern)
        self.path = os.path.join(ndir, SERIES)
        self.on_link = on_link  # called with every link's url (a list) when one is new
        self.lock = threading.Lock()
        self.written = 0.0

    def feed(self, data: bytes, attempt: int) -> None:
        with self.lock:
            links = len(self.tracker.links)
            self.tracker.feed_bytes(data, attempt)
            if len(self.tracker.links) != links and self.on_link is not None:
                self.on_link(list(self.tracker.links))
            if time.monotonic() - self.written > WRITE_EVERY_S:
                self.tracker.flush()
                if self.tracker.changed:
                    self._write()

    def flush(self) -> None:
        with self.lock:
            self.tracker.flush()
            if self.tracker.changed:
                self._write()

    def step(self, attempt: int) -> int | None:
        """The step `attempt` reached, as its lines said (None: none said one)."""
        with self.lock:
            self.tracker.flush()
            last = self.tracker.last()
        return last["step"] if last["attempt"] == attempt else None

    def _write(self):
        self.written, self.tracker.changed = time.monotonic(), False
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(self.tracker.dump(), f)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a full disk: the launcher's copy still has it


def read_series(ndir: str) -> dict[str, Any] | None:
    """A node directory's series.json, or None."""
    try:
        with open(os.path.join(ndir, SERIES)) as f:
            found = json.load(f)
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None
