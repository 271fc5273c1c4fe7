"""The deep check, launcher side: remote/host/fabric.py's result line read, its figures worded as
findings (remote/checks/judge.py's shape) and, per host, as figures for `--json`. Pure: no I/O.

The line comes from a host: it is read defensively (bounded, every field checked, a malformed
entry dropped rather than trusted). The decisions:
- the all-reduce: nccl-tests' algbw and busbw per size; the largest size is the headline;
- links: a host's send and receive figures are each the best over its partners (a healthy host
  paired once with a slow one still has a fast partner); a host whose worse direction is below
  half the median of all hosts' is named (`slow-link`);
- GPUs: one below 0.7x the median of its model, in matmul or in device-to-host copy, is named
  (`slow-gpu`); a GPU whose test raised fails (`gpu-test`); dcgmi's verdict per host (`dcgm`).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ddptui.remote.events import Finding, Level
from ddptui.remote.host.fabric import DCGM_ARGV, MARK, VERSION, bus_factor, rate_text, size_text

MAX_LINE = 8 << 20  # characters: ~200 bytes a rank, 16 KiB of dcgmi a host, at 2,048 GPUs
MAX_TEXT = 200  # a name or a message, as shown
MAX_DCGM = 16384  # dcgmi's output per host, as the worker keeps it
SLOW_LINK = 0.5  # of the median host
SLOW_GPU = 0.7  # of the median GPU of the same model
DCGM = " ".join(DCGM_ARGV)

T = TypeVar("T")


class BadResult(ValueError):
    """The result line cannot be read; the message says why, on one line."""


@dataclass(frozen=True)
class Size:
    """One all-reduce size: `seconds` per operation, averaged over the ranks."""

    nbytes: int
    iters: int
    seconds: float
    ranks: int

    @property
    def algbw(self) -> float:
        return self.nbytes / self.seconds

    @property
    def busbw(self) -> float:
        return self.algbw * bus_factor(self.ranks)


@dataclass(frozen=True)
class Link:
    """One timed direction of one pair of hosts (node ranks), in one round."""

    round: int
    src: int
    dst: int
    nbytes: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.nbytes / self.seconds


@dataclass(frozen=True)
class Gpu:
    """One rank's GPU: matmul in flop/s, device-to-host copy in bytes/s."""

    node: int
    rank: int
    index: int
    name: str
    uuid: str
    matmul: float | None
    d2h: float | None
    error: str | None


@dataclass(frozen=True)
class Dcgm:
    """`dcgmi diag -r 1` on one host: its exit status (None: it did not finish) and output."""

    node: int
    rc: int | None
    out: str


@dataclass(frozen=True)
class Report:
    backend: str
    world: int
    nodes: int
    seconds: float
    allreduce: tuple[Size, ...]
    links: tuple[Link, ...]
    gpus: tuple[Gpu, ...]
    dcgm: tuple[Dcgm, ...]
    hostnames: Mapping[int, str]  # node rank -> what the host calls itself

    @property
    def headline(self) -> Size | None:
        """The largest size measured: what the fabric sustains."""
        return max(self.allreduce, key=lambda s: s.nbytes, default=None)


# -- reading the line ------------------------------------------------------------------------


def parse(line: str) -> Report:
    """The report in rank 0's result line (anything before the mark is passed over)."""
    at = line.find(MARK)
    if at < 0:
        raise BadResult("no result line")
    text = line[at + len(MARK) :]
    if len(text) > MAX_LINE:
        raise BadResult(f"the result line is {len(text)} characters long, over {MAX_LINE}")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise BadResult(f"the result line is not JSON: {exc}") from None
    except RecursionError:  # a hostile nesting
        raise BadResult("the result line is nested too deep") from None
    if not isinstance(doc, dict):
        raise BadResult("the result line is not a JSON object")
    if doc.get("v") != VERSION:
        raise BadResult(f"the result line is of version {_text(doc.get('v'))}, not {VERSION}")
    world = _count(doc.get("world"))
    if not world:
        raise BadResult("the result line names no ranks")
    ranks = [r for r in _dicts(doc.get("ranks")) if _count(r.get("node")) is not None]
    return Report(
        backend=_text(doc.get("backend")),
        world=world,
        nodes=_count(doc.get("nodes")) or 0,
        seconds=_number(doc.get("seconds")) or 0.0,
        allreduce=_entries(doc.get("allreduce"), lambda d: _size(d, world)),
        links=_entries(doc.get("links"), _link),
        gpus=_entries(ranks, _gpu),
        dcgm=_entries(doc.get("dcgm"), _dcgm),
        hostnames={_count(r["node"]) or 0: _text(r.get("host")) for r in ranks},
    )


def _size(d: Mapping[str, Any], world: int) -> Size | None:
    nbytes, iters = _count(d.get("bytes")), _count(d.get("iters"))
    seconds = _number(d.get("seconds"))
    if not nbytes or not iters or not seconds:
        return None
    return Size(nbytes, iters, seconds, world)


def _link(d: Mapping[str, Any]) -> Link | None:
    r, src, dst, nbytes = (_count(d.get(k)) for k in ("round", "src", "dst", "bytes"))
    seconds = _number(d.get("seconds"))
    if r is None or src is None or dst is None or not nbytes or not seconds:
        return None
    return Link(r, src, dst, nbytes, seconds)


def _gpu(r: Mapping[str, Any]) -> Gpu | None:
    g = r.get("gpu")
    if not isinstance(g, dict):
        return None
    return Gpu(
        node=_count(r.get("node")) or 0,
        rank=_count(r.get("rank")) or 0,
        index=_count(g.get("index")) or 0,
        name=_text(g.get("name")) or "unknown GPU",
        uuid=_text(g.get("uuid")),
        matmul=_number(g.get("matmul")),
        d2h=_number(g.get("d2h")),
        error=_text(g.get("error")) or None,
    )


def _dcgm(d: Mapping[str, Any]) -> Dcgm | None:
    node, rc, out = _count(d.get("node")), d.get("rc"), d.get("out")
    if node is None or not isinstance(out, str):
        return None
    rc = rc if isinstance(rc, int) and not isinstance(rc, bool) else None
    return Dcgm(node, rc, out[-MAX_DCGM:])


def _entries(value: Any, read: Callable[[dict[str, Any]], T | None]) -> tuple[T, ...]:
    return tuple(e for e in map(read, _dicts(value)) if e is not None)


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [d for d in _items(value) if isinstance(d, dict)]


def _count(value: Any) -> int | None:
    """A non-negative int (not a bool, not a float), else None."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def _number(value: Any) -> float | None:
    """A finite non-negative number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _text(value: Any, limit: int = MAX_TEXT) -> str:
    """A host's string for one line of a report: bounded, control characters as `?`."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value)[:limit]
    return "".join(c if c.isprintable() else "?" for c in text[:limit])


# -- judging ---------------------------------------------------------------------------------


def failed(why: str) -> Finding:
    """The deep check gave no report (its ranks failed, it ran out of time, a line unread)."""
    return Finding("failure", "fabric", f"the deep check gave no result: {why}")


def findings(report: Report, names: Sequence[str]) -> tuple[Finding, ...]:
    """Everything the report says, worded; names[k] is node k's name (the inventory's)."""
    name = _namer(names)
    return (
        *_allreduce(report),
        *_links(report, name),
        *_gpus(report, name),
        *_dcgms(report, name),
    )


def _namer(names: Sequence[str]) -> Callable[[int], str]:
    return lambda k: names[k] if 0 <= k < len(names) else f"node {k}"


def _allreduce(report: Report) -> list[Finding]:
    if report.world == 1:  # a figure it gives would be a copy's, not the fabric's
        return [Finding("ok", "fabric-allreduce", "one rank: no all-reduce to measure")]
    top = report.headline
    if top is None:
        why = "no all-reduce was measured: not even the smallest fitted the time left"
        return [Finding("warning", "fabric-allreduce", why)]
    sizes = ", ".join(size_text(s.nbytes) for s in report.allreduce)
    return [
        Finding(
            "ok",
            "fabric-allreduce",
            f"all-reduce of {size_text(top.nbytes)} across {report.world} ranks "
            f"({report.backend}): {top.seconds * 1e3:.3g} ms, algbw {rate_text(top.algbw)}, "
            f"busbw {rate_text(top.busbw)} (sizes {sizes})",
        )
    ]


@dataclass(frozen=True)
class HostLink:
    """A host's best send and receive figures over its partners (bytes/s)."""

    send: float | None
    receive: float | None
    peers: int

    @property
    def worse(self) -> float:
        return min(x for x in (self.send, self.receive) if x is not None)


def host_links(links: Iterable[Link]) -> dict[int, HostLink]:
    """node rank -> its figures: the best per direction, so one slow partner does not count."""
    sent: dict[int, list[float]] = {}
    got: dict[int, list[float]] = {}
    peers: dict[int, set[int]] = {}
    for link in links:
        sent.setdefault(link.src, []).append(link.rate)
        got.setdefault(link.dst, []).append(link.rate)
        peers.setdefault(link.src, set()).add(link.dst)
        peers.setdefault(link.dst, set()).add(link.src)
    return {
        k: HostLink(max(sent.get(k, ()), default=None), max(got.get(k, ()), default=None), len(p))
        for k, p in sorted(peers.items())
    }


def _links(report: Report, name: Callable[[int], str]) -> list[Finding]:
    hosts = host_links(report.links)
    if not hosts:
        return []
    median = statistics.median(h.worse for h in hosts.values())
    if len(hosts) < 3:  # two hosts share their one link: nothing to tell them apart by
        return [Finding("ok", "slow-link", f"{rate_text(median)} between the two hosts")]
    slow = [
        Finding(
            "warning",
            "slow-link",
            f"{rate_text(h.worse)} against a median of {rate_text(median)} "
            f"(send {_rate(h.send)}, receive {_rate(h.receive)}, best of {h.peers} peers)",
            name(k),
        )
        for k, h in hosts.items()
        if h.worse < SLOW_LINK * median
    ]
    if slow:
        return slow
    return [Finding("ok", "slow-link", f"{len(hosts)} hosts' links, median {rate_text(median)}")]


def _rate(bps: float | None) -> str:
    return "-" if bps is None else rate_text(bps)


def _gpus(report: Report, name: Callable[[int], str]) -> list[Finding]:
    found = [
        Finding("failure", "gpu-test", f"{_gpu_label(g)}: the test failed: {g.error}", name(g.node))
        for g in report.gpus
        if g.error
    ]
    models: dict[str, list[Gpu]] = {}
    for g in report.gpus:
        if not g.error:
            models.setdefault(g.name, []).append(g)
    for model, gpus in models.items():
        medians = _medians(gpus)
        slow = [(g, _slow_parts(g, medians)) for g in gpus]
        found += [
            Finding("warning", "slow-gpu", f"{_gpu_label(g)}: {'; '.join(parts)}", name(g.node))
            for g, parts in slow
            if parts
        ]
        if not any(parts for _, parts in slow):
            # one GPU has no median to be slow against, but its own figures still tell
            many = len(gpus) > 1
            shown = medians if many else {w: getattr(gpus[0], w) for w, *_ in GPU_FIGURES}
            said = [
                f"{label}{' median' if many else ''} {fmt(m)}"
                for what, label, fmt in GPU_FIGURES
                if (m := shown[what])
            ]
            text = ", ".join(said) or "no figures"
            found.append(Finding("ok", "slow-gpu", f"{len(gpus)}x {model}: {text}"))
    return found


def _flops(x: float) -> str:
    return f"{x / 1e12:.3g} TFLOP/s"


# (Gpu field, as worded, its unit)
GPU_FIGURES: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("matmul", "matmul", _flops),
    ("d2h", "device-to-host", rate_text),
)


def _medians(gpus: Sequence[Gpu]) -> dict[str, float | None]:
    """Per figure, its median over the GPUs that have it; None with fewer than two."""
    out = {}
    for what, *_ in GPU_FIGURES:
        values = [v for g in gpus if (v := getattr(g, what)) is not None]
        out[what] = statistics.median(values) if len(values) > 1 else None
    return out


def _slow_parts(g: Gpu, medians: Mapping[str, float | None]) -> list[str]:
    parts = []
    for what, label, fmt in GPU_FIGURES:
        value, median = getattr(g, what), medians[what]
        if value is not None and median and value < SLOW_GPU * median:
            parts.append(f"{label} {fmt(value)} against a median of {fmt(median)}")
    return parts


def _gpu_label(g: Gpu) -> str:
    return f"GPU {g.index} ({g.name}, rank {g.rank})"


# -- DCGM ------------------------------------------------------------------------------------

# A row of dcgmi's table: `| name | value |`; the value column holds 45 characters.
ROW = re.compile(r"^\|(?P<name>[^|]*)\|(?P<value>[^|]*)\|\s*$")
RESULTS = {"Pass", "Fail", "Warn", "Skip", "Not Run"}
ENTITY = re.compile(r"^(?P<entity>[A-Za-z_ ]+\s?\d+): (?P<result>Pass|Fail|Warn|Skip|Not Run)$")
NOTE = re.compile(r"^(Warning|Info)(:|$)")  # `Warning`, `Warning: GPU0`; not `Inforom`
CELL = 45


@dataclass(frozen=True)
class DcgmVerdict:
    level: Level
    message: str


def dcgm_verdict(rc: int | None, out: str) -> DcgmVerdict:
    """dcgmi's table (DCGM 3 and 4 alike) read: Fail is a failure, Warn a warning. Its
    messages are wrapped at 45 characters; a full cell continues on the next row."""
    tests: list[tuple[str, str]] = []  # (test, result) of those not passed
    notes: list[str] = []
    test, note_full, table = "", False, False
    for line in out.splitlines():
        m = ROW.match(line.strip())
        if not m or line.strip().startswith(("|-", "+")):
            continue
        table = True
        name, raw = m["name"].strip(), m["value"][1:].rstrip()
        value = raw.strip()
        if NOTE.match(name):
            who = name.partition(":")[2].strip()
            notes.append(f"{who}: {value}" if who else value)
            note_full = len(raw) >= CELL
        elif name and value in RESULTS:
            test = name
            if value in ("Fail", "Warn"):
                tests.append((test, value))
        elif not name and (e := ENTITY.match(value)):
            if e["result"] in ("Fail", "Warn"):
                tests.append((f"{test} {e['entity']}", e["result"]))
        elif not name and notes:  # a wrapped message goes on
            notes[-1] += raw if note_full else " " + value
            note_full = len(raw) >= CELL
    if rc is None:
        return DcgmVerdict("warning", f"{DCGM} did not finish in time")
    if not table:
        said = next((ln.strip() for ln in out.splitlines() if ln.strip()), f"exit {rc}")
        return DcgmVerdict("warning", f"{DCGM} did not run: {_text(said)}")
    fails = [f"{t}: {r}" for t, r in tests if r == "Fail"]
    warns = [f"{t}: {r}" for t, r in tests if r == "Warn"]
    level: Level = "failure" if fails else "warning" if warns or rc else "ok"
    if level == "ok":
        return DcgmVerdict("ok", f"{DCGM}: Pass")
    why = "; ".join(fails + warns) or f"exit {rc}"
    detail = f" ({_text(' / '.join(notes), 400)})" if notes else ""
    return DcgmVerdict(level, f"{DCGM}: {why}{detail}")


def _dcgms(report: Report, name: Callable[[int], str]) -> list[Finding]:
    out = []
    for d in report.dcgm:
        v = dcgm_verdict(d.rc, d.out)
        out.append(Finding(v.level, "dcgm", v.message, name(d.node)))
    return out


# -- figures for --json ----------------------------------------------------------------------


def figures(report: Report, names: Sequence[str]) -> dict[str, Any]:
    """The measured figures, per size and per host (by name), in bytes, seconds and flop/s."""
    name = _namer(names)
    links = host_links(report.links)
    dcgm = {d.node: dcgm_verdict(d.rc, d.out) for d in report.dcgm}
    nodes = sorted({*links, *dcgm, *report.hostnames, *(g.node for g in report.gpus)})
    hosts = {}
    for k in nodes:
        link = links.get(k)
        hosts[name(k)] = {
            "hostname": report.hostnames.get(k),
            "link_send": link and link.send,
            "link_receive": link and link.receive,
            "link_peers": link.peers if link else 0,
            "gpus": [_gpu_figures(g) for g in report.gpus if g.node == k],
            "dcgm": dcgm[k].level if k in dcgm else None,
        }
    top = report.headline
    return {
        "backend": report.backend,
        "ranks": report.world,
        "seconds": report.seconds,
        "allreduce": [_size_figures(s) for s in report.allreduce],
        "headline": top and _size_figures(top),
        "hosts": hosts,
    }


def _size_figures(s: Size) -> dict[str, Any]:
    return dict(bytes=s.nbytes, iters=s.iters, seconds=s.seconds, algbw=s.algbw, busbw=s.busbw)


def _gpu_figures(g: Gpu) -> dict[str, Any]:
    return dict(
        index=g.index,
        rank=g.rank,
        name=g.name,
        uuid=g.uuid,
        matmul_flops=g.matmul,
        d2h_bytes_per_s=g.d2h,
        error=g.error,
    )
