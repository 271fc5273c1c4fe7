"""Words both front-ends use (the dashboard and the headless commands): how a failure, a path,
the same line from many hosts and a row of the run history read, and what of a host's or a
rank's text may be shown at all."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ddptui.remote import fold
from ddptui.remote.events import Failure, LeaseHolder, RunFinished, progress_text
from ddptui.remote.host.safetext import clean
from ddptui.remote.leases import words
from ddptui.remote.store import runs

T = TypeVar("T")
_SCALARS = frozenset((int, float, bool, type(None)))


def shown(value: T) -> T:
    """`value` (an event, or any data in one) with every text in it as it may be shown: no
    escape sequence or control character but newline and tab (remote/host/safetext.py's one
    cleaner). The same object where nothing needed cleaning."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is str:
        return clean(value)  # type: ignore[arg-type,return-value]
    out: Any = value
    if isinstance(value, tuple | list):
        if all(type(v) in _SCALARS for v in value):  # a curve's point, a list of ranks
            return value
        items = [shown(v) for v in value]
        if any(a is not b for a, b in zip(items, value, strict=True)):
            out = type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    elif isinstance(value, dict):
        pairs = [(shown(k), shown(v)) for k, v in value.items()]
        if any(p is not q for pair, old in zip(pairs, value.items(), strict=True)
               for p, q in zip(pair, old, strict=True)):  # fmt: skip
            out = dict(pairs)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = shown(old)
            if new is not old:
                changed[f.name] = new
        if changed:
            out = dataclasses.replace(value, **changed)
    return out  # type: ignore[no-any-return]


def failure_line(f: Failure) -> str:
    """`rank 3 on node1 (exit code 1): RuntimeError: ...`"""
    from ddptui.remote.run.failures import describe_exit  # the engine's, loaded once needed

    who = f"rank {f.rank} on {f.host}" if f.rank is not None else f.host
    code = f" ({describe_exit(f.exit_code)})" if f.exit_code is not None else ""
    return f"{who}{code}: {f.message}"


def tilde(path: str) -> str:
    """`~/...` for a path under the home directory: shorter, and the same for everyone."""
    home = str(Path.home())
    return "~" + path[len(home) :] if path.startswith(home + "/") else path


class Fold:
    """Lines that differ only by the host they name, as one line naming the hosts folded.

    `add(host, text)` takes a host's line; the host's name and address in the text are
    placeholders, so `timed out connecting to root@10.0.0.11:22` on 128 hosts is one line:
    `10.0.0.[11-138]: timed out connecting to root@10.0.0.[11-138]:22`. A trailing `, 0.21 s`
    folds into a range of times. `take()` gives each group once, in the order first seen.
    """

    def __init__(self, addresses: Mapping[str, str] | None = None) -> None:
        self.addresses = dict(addresses or {})
        self.groups: dict[tuple[Hashable, str], tuple[list[str], list[float]]] = {}

    def add(self, host: str | None, text: str, key: Hashable = None) -> None:
        seconds = None
        if m := _TIMING.search(text):
            text, seconds = text[: m.start()], float(m[1])
        if host is not None:
            text = _placeholders(text, host, self.addresses.get(host))
        hosts, times = self.groups.setdefault((key, text), ([], []))
        if host is not None:
            hosts.append(host)
        if seconds is not None:
            times.append(seconds)

    def __bool__(self) -> bool:
        return bool(self.groups)

    def take(self) -> list[tuple[Hashable, str, str]]:
        """(key, the hosts folded, the text with them in it) of each group; then none held."""
        out = []
        for (key, text), (hosts, times) in self.groups.items():
            names = fold.hosts(hosts)
            addresses = fold.hosts(self.addresses.get(h, h) for h in hosts)
            text = text.replace(_NAME, names).replace(_ADDRESS, addresses)
            if times:
                low, high = min(times), max(times)
                text += f", {low:.2f} s" if low == high else f", {low:.2f}-{high:.2f} s"
            out.append((key, names, text))
        self.groups = {}
        return out


_NAME, _ADDRESS = "\x00name\x00", "\x00address\x00"
_TIMING = re.compile(r", (\d+(?:\.\d+)?) s$")


def _placeholders(text: str, name: str, address: str | None) -> str:
    """The host's own name and address in `text` as placeholders (whole words only)."""
    for word, mark in ((name, _NAME), (address, _ADDRESS)):
        if word and len(word) > 1:
            text = re.sub(rf"(?<![\w.-]){re.escape(word)}(?![\w-]|\.\w)", mark, text)
    return text


# -- the run history (`ddptui runs`, the dashboard's `h`) ----------------------------------------

RUN_COLUMNS = (
    "run", "status", "hosts", "world", "started", "elapsed", "failing rank", "training", "why",
)  # fmt: skip
WHY_SHOWN = 100  # characters of the why in a table (`runs --json` has it whole)


def run_row(r: runs.RunRecord) -> dict[str, Any]:
    s = r.summary or {}
    started = r.started_at
    if s.get("elapsed") is not None:
        elapsed: float | None = float(s["elapsed"])
    elif r.status == "running" and started:
        elapsed = time.time() - started
    else:
        elapsed = None
    progress, links = runs.training(r)
    return {
        "id": r.run_id,
        "status": r.status,
        "hosts": r.info.get("hosts", []),
        "world_size": s.get("world_size", r.info.get("world_size")),
        "started": started,
        "elapsed": elapsed,
        "failing_rank": s.get("failing_rank"),
        "failing_host": s.get("failing_host"),
        "attempts": attempts(r),
        "bad_hosts": [{"host": h, "why": why} for h, why in runs.bad_hosts(r).items()],
        "progress": progress,
        "checkpoint": runs.checkpoint(r),
        "links": links,
        "detail": r.detail or ((s.get("failure") or {}).get("message") or ""),
        "run_dir": str(r.dir),
        "slurm": s.get("slurm") or r.info.get("slurm"),  # its job: id, state, nodes
    }


def run_ended(fin: RunFinished, took: bool = True) -> str:
    """`run succeeded after 2 attempts in 63.0 s (exit 0)`; a lost run says why."""
    tries = f" after {len(fin.attempts)} attempts" if len(fin.attempts) > 1 else ""
    elapsed = f" in {fin.elapsed:.1f} s" if took else ""
    why = f": {fin.reason}" if fin.reason else ""
    return f"run {fin.status}{tries}{elapsed} (exit {fin.exit_code}){why}"


def attempts(r: runs.RunRecord) -> int | None:
    """Attempts of the job so far (job.restarts): the summary's, else node 0's word."""
    if r.summary is not None:
        return len(r.summary.get("attempts") or ()) or None
    seen = [s["attempt"] for s in r.states.values() if s and isinstance(s.get("attempt"), int)]
    return max(seen) + 1 if seen else None


def run_cells(r: dict[str, Any]) -> tuple[str, ...]:
    hosts = r["hosts"]
    failing = "" if r["failing_rank"] is None else f"{r['failing_rank']} ({r['failing_host']})"
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["started"])) if r["started"] else ""
    tries = f" ({r['attempts']} attempts)" if (r.get("attempts") or 0) > 1 else ""
    bad = ", ".join(b["host"] for b in r.get("bad_hosts") or ())
    job = r.get("slurm") or {}
    slurm = f" (job {job.get('job')} {job.get('state') or ''})".replace(" )", ")") if job else ""
    return (
        r["id"],
        (r["status"] or "…") + tries + slurm,
        (f"{len(hosts)}: {hosts[0]}{'…' if len(hosts) > 1 else ''}" if hosts else "0")
        + (f" (bad: {bad})" if bad else ""),
        "" if r["world_size"] is None else str(r["world_size"]),
        started,
        "" if r["elapsed"] is None else runs.age(r["elapsed"]),
        failing or (r["failing_host"] or ""),
        _training(r.get("progress"), r.get("checkpoint")),
        "" if r["status"] == "succeeded" else _cut(r.get("detail") or "", WHY_SHOWN),
    )


def checkpoint_text(c: Mapping[str, Any] | None, now: float | None = None) -> str:
    """job.checkpoint's newest: `step 10, saved 3 m 2 s ago (/ckpt/step_10.pt)`."""
    if not c:
        return ""
    age = max(0.0, (time.time() if now is None else now) - float(c.get("at") or 0))
    what = f"step {c['step']}, saved" if c.get("step") is not None else "saved"
    return f"{what} {runs.age(age)} ago ({tilde(str(c.get('path') or ''))})"


def _cut(text: str, most: int) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= most else line[: most - 1] + "…"


def _training(last: dict[str, Any] | None, checkpoint: dict[str, Any] | None = None) -> str:
    """`step 1200/5000 · loss 0.41 · checkpoint step 1000`: the last step and loss (or the first
    metric), and job.checkpoint's newest."""
    text = ""
    if last:
        metrics = last.get("metrics") or {}
        loss = [k for k in metrics if k == "loss"] or [k for k in metrics if "loss" in k]
        shown = {k: metrics[k] for k in (loss or list(metrics))[:1]}
        text = progress_text(last.get("step"), last.get("total"), None, shown)
    if checkpoint:
        step = checkpoint.get("step")
        saved = f"checkpoint step {step}" if step is not None else "checkpoint saved"
        text = f"{text} · {saved}" if text else saved
    return text


def lease_holder(h: LeaseHolder) -> str:
    """`bob's run R (node 1, since 12:01 (5 min), detached, from bob@laptop)`: who holds a GPU
    (`ddptui who`, the dashboard's host view)."""
    about = [f"node {h.node}" if h.node is not None else "", words.since(h), h.mode]
    about.append(f"from {h.launcher}" if h.launcher else "")
    return clean(f"{words.run_of(h)} ({', '.join(a for a in about if a)})")  # hosts' words


def lease_waiter(h: LeaseHolder) -> str:
    """`alice's run Q, 2 GPUs (since 12:05 (1 min), from alice@desk)`: a launch in the queue."""
    about = [words.since(h), f"from {h.launcher}" if h.launcher else ""]
    wants = f", {h.count} GPU(s)" if h.count else ""
    return clean(f"{words.run_of(h)}{wants} ({', '.join(a for a in about if a)})")
