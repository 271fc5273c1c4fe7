"""GPU and network health, read on this host: what nvidia-smi says of each GPU's memory errors
and clocks, the Xid events of the kernel log, and the InfiniBand ports. python3 >= 3.8,
standard library only; every read is bounded in time.

Fail closed: a GPU that cannot be read (nvidia-smi failing, hanging, or answering `ERR!` or
`[GPU is lost]`) is a failure, not a GPU without news. But a failed read is not a failed GPU
until it is confirmed: a read that failed with no definite fact (an exit, a signal someone else
sent, a row cut short or nothing at all) is read again at once, within the same time bound, and
only a second failure in a row stands; a hang past the bound, and a GPU's own word (`ERR!`,
`GPU is lost`), stand at once. The answer is plain data:

    {"gpus": N read or None, "issues": [{level, source, gpu, bus_id, what, kind, count,
     evidence}], "kernel_log": "journalctl -k" | "/dev/kmsg" | None, "kernel_log_error":
     str | None, "ib": [{device, port, state, link_downed}]}

level is "failure" (the host must not run a job) or "warning" (shown, acts on nothing);
evidence: what the verdict rests on, raw and bounded (each read's exit, stderr and row; the
kernel's line).
"""

from __future__ import annotations  # py3.8: annotations stay unevaluated

import os
import re
import shutil
import signal
import time

from .owncommands import OwnCommands
from .protocol import SMI_CSV as CSV

TYPE_CHECKING = False  # typing costs milliseconds of import on every host, for nothing there
if TYPE_CHECKING:
    from typing import Any, Callable

    Run = Callable[[list[str], float], tuple[int | None, str, str]]

SMI_TIMEOUT = 15.0  # a degrading GPU can make nvidia-smi hang: past this it is not healthy
LOG_TIMEOUT = 5.0
LOG_MAX = 8 << 20  # bytes of kernel log read at most
TEXT_MAX = 300  # characters of any one message kept
EVIDENCE_MAX = 200  # characters of each stream of a read kept as a verdict's evidence
READS = 2  # a failed read with no definite fact is read again at once: a failure stands twice
ISSUES_MAX = 64
KMSG = "/dev/kmsg"
SYS_IB = "/sys/class/infiniband"

_COMMON = (
    "index",
    "pci.bus_id",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.volatile.total",
    "retired_pages.pending",
)
_REMAP = ("remapped_rows.pending", "remapped_rows.failure")
_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")
# Newest names first: drivers from R535 on call the throttle reasons clocks_event_reasons, older
# ones clocks_throttle_reasons; drivers before Ampere's know no remapped rows. An unknown field
# fails the whole query (exit 2, `... is not a valid field to query`), so the next set is tried.
FIELD_SETS = (
    _COMMON + _REMAP + tuple("clocks_event_reasons." + r for r in _REASONS),
    _COMMON + _REMAP + tuple("clocks_throttle_reasons." + r for r in _REASONS),
    _COMMON + tuple("clocks_throttle_reasons." + r for r in _REASONS),
)
SLOWDOWN = {
    "hw_slowdown": "hardware slowdown",
    "hw_thermal_slowdown": "hardware thermal slowdown",
    "hw_power_brake_slowdown": "power brake slowdown",
    "sw_thermal_slowdown": "thermal slowdown",
}
LOST = ("ERR!", "GPU is lost")  # what a field of a GPU gone wrong reads
UNREADABLE = "unreadable"  # an issue's kind: a GPU (or all) that nvidia-smi cannot read

# Xid 45 is a job's own cleanup (its processes killed); these mean the GPU or its links failed:
# 48 double-bit ECC, 63/64 row remapping, 74 NVLink, 79 off the bus, 94/95 contained/uncontained
# ECC, 119 GSP timeout, 154 a recovery action required. Any other Xid is a warning.
XID_IGNORED = frozenset({45})
XID_FAILURES = frozenset({48, 63, 64, 74, 79, 94, 95, 119, 154})
_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+)[^)]*\): (\d+),\s*(.*)")


def read(smi: str | None, kmsg: str | None = KMSG, journalctl: str | None = "journalctl",
         ib_root: str = SYS_IB, timeout: float = SMI_TIMEOUT, since: float | None = None,
         run: Run | None = None) -> dict[str, Any]:  # fmt: skip
    """This host's health. smi: nvidia-smi's path (None: no GPU to read, no Xid to look for);
    kmsg (None: not read), journalctl (a name looked up on PATH, a path, or None: not asked)
    and ib_root: the kernel log's device and reader and the InfiniBand sysfs class, which tests
    stand in. since: the journal from then on (time.time()), not the whole boot's. run: how a
    command runs (owncommands.OwnCommands.run: a supervisor's keeps its reads apart from its
    job)."""
    run = run or OwnCommands().run
    out: dict[str, Any] = {"gpus": None, "issues": [], "kernel_log": None,
                           "kernel_log_error": None, "ib": []}  # fmt: skip
    issues = out["issues"]
    if smi:
        rows = _gpu_rows(smi, timeout, issues, run)
        out["gpus"] = None if rows is None else len(rows)
        out["kernel_log"], lines, out["kernel_log_error"] = kernel_log(kmsg, journalctl, since,
                                                                       run)  # fmt: skip
        issues.extend(xid_issues(lines, rows or {}))
    out["ib"] = ib_ports(ib_root)
    issues.extend(ib_issues(out["ib"]))
    if len(issues) > ISSUES_MAX:  # bounded, the failures kept first
        issues[:] = sorted(issues, key=lambda i: i["level"] != "failure")[:ISSUES_MAX]
    return out


def _issue(level: str, source: str, what: str, gpu: int | None = None, bus_id: str | None = None,
           kind: str = "", count: int = 0, evidence: list[str] | None = None
           ) -> dict[str, Any]:  # fmt: skip
    """kind names what is wrong apart from its count (`ecc`, `xid 79`), which a run's watch
    compares read to read (remote/host/healthwatch.py); evidence: what it rests on."""
    return {"level": level, "source": source, "gpu": gpu, "bus_id": bus_id,
            "what": what[:TEXT_MAX], "kind": kind or what[:TEXT_MAX], "count": count,
            "evidence": list(evidence or ())}  # fmt: skip


# -- nvidia-smi ----------------------------------------------------------------------------------


def _gpu_rows(smi: str, timeout: float, issues: list[Any], run: Run) -> dict[int, str] | None:
    """The health fields read, confirmed: {index: bus id} of the GPUs read, their issues added;
    None (and a failure) when nvidia-smi could not answer at all. A read that failed with no
    definite fact is read again at once, within `timeout` from the first: only a failure seen
    twice in a row stands, both reads its evidence."""
    deadline = time.monotonic() + timeout
    failed: list[str] = []  # each failed read, as evidence
    for n in range(1, READS + 1):
        found: list[Any] = []
        rows, again = _read_rows(smi, n, deadline, timeout, found, failed, run)
        if not again or time.monotonic() >= deadline:
            break
    for issue in found:
        if issue["kind"] == UNREADABLE and failed:  # else its own row says it (`ERR!`)
            issue["evidence"] = failed[-READS:]
    issues.extend(found)
    return rows


def _read_rows(smi: str, n: int, deadline: float, timeout: float, found: list[Any],
               failed: list[str], run: Run) -> tuple[dict[int, str] | None, bool]:  # fmt: skip
    """Read n: the health fields asked by their newest names first, its issues in `found`.
    (rows or None, whether its failure is worth a second read)."""
    why = ""
    for fields in FIELD_SETS:
        code, out, err = run([smi, "--query-gpu=" + ",".join(fields), CSV],
                             max(0.0, deadline - time.monotonic()))  # fmt: skip
        if code == 0:
            malformed = _malformed(fields, out)
            if malformed:
                failed.append(_read_said(n, code, timeout, stdout=out, stderr=err))
            if malformed == "nothing":
                found.append(_issue("failure", "nvidia-smi", "GPUs cannot be read: nvidia-smi "
                                    "answers nothing", kind=UNREADABLE))  # fmt: skip
                return None, True
            said = _read_said(n, code, timeout, stderr=err)
            return parse_rows(fields, out, found, said), bool(malformed)
        why = _said(out, err)
        if code is not None and "is not a valid field" in why:
            continue  # an older driver: its names next
        failed.append(_read_said(n, code, timeout, stdout=out, stderr=err))
        if code is None:  # hung: not worth asking again (and no time left to)
            what = "nvidia-smi did not answer in {:g} s".format(timeout)
        else:
            what = "nvidia-smi failed ({}): {}".format(_ended(code), why or "no message")
        found.append(_issue("failure", "nvidia-smi", "GPUs cannot be read: " + what,
                            bus_id=_lost_bus(why), kind=UNREADABLE))  # fmt: skip
        return None, code is not None and not any(mark in why for mark in LOST)
    # no field set this driver knows: the GPUs cannot be judged, though they answer
    found.append(_issue("warning", "nvidia-smi", "health fields not supported: " + why))
    return {}, False


def _malformed(fields: tuple[str, ...], text: str) -> str:
    """What is wrong with an answer's shape (a read cut short, output lost), where nothing in
    it says a GPU is gone (`ERR!` in a short row is the GPU's word: parse_rows says it)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return "nothing"
    if any(mark in text for mark in LOST):
        return ""
    short = any(len(ln.split(",")) != len(fields) for ln in lines)
    return "a short row" if short else ""


def parse_rows(fields: tuple[str, ...], text: str, issues: list[Any],
               said: str = "") -> dict[int, str]:  # fmt: skip
    """Each GPU's row of the health query → its issues, each with its row as evidence (said:
    the read's words); {index: bus id}."""
    rows: dict[int, str] = {}
    for n, line in enumerate(ln for ln in text.splitlines() if ln.strip()):
        values = [v.strip() for v in line.split(",")]
        row = {field: values[k] for k, field in enumerate(fields[: len(values)])}
        index = int(row["index"]) if row.get("index", "").isdigit() else n
        bus = row.get("pci.bus_id") or None
        rows[index] = bus or ""
        evidence = ["{}; {}".format(said, _quoted("row", line)) if said else _quoted("row", line)]
        for issue in _gpu_issues(row, index, bus, len(values) == len(fields)):
            issue["evidence"] = evidence
            issues.append(issue)
    return rows


def _gpu_issues(row: dict[str, str], gpu: int, bus: str | None, whole: bool) -> list[Any]:
    def issue(level: str, what: str, kind: str = "", count: int = 0) -> dict[str, Any]:
        return _issue(level, "nvidia-smi", what, gpu, bus, kind, count)

    lost = [v for v in row.values() if any(mark in v for mark in LOST)]
    if lost or not whole:
        return [issue("failure", "cannot be read: nvidia-smi answers {}".format(
            lost[0] if lost else "a short row"), UNREADABLE)]  # fmt: skip
    found = []
    uncorrected = _count(row.get("ecc.errors.uncorrected.volatile.total"))
    if uncorrected:
        found.append(issue("failure", "{} uncorrectable ECC errors".format(uncorrected),
                           "ecc", uncorrected))  # fmt: skip
    if _yes(row.get("remapped_rows.failure")):
        found.append(issue("failure", "row remapping failed"))
    if _yes(row.get("remapped_rows.pending")):
        found.append(issue("failure", "remapped rows pending (the GPU needs a reset)"))
    if _yes(row.get("retired_pages.pending")):
        found.append(issue("failure", "retired pages pending (the GPU needs a reset)"))
    corrected = _count(row.get("ecc.errors.corrected.volatile.total"))
    if corrected:
        found.append(issue("warning", "{} correctable ECC errors".format(corrected),
                           "ecc corrected", corrected))  # fmt: skip
    slow = [text for name, text in SLOWDOWN.items() if _active(row, name)]
    if slow:
        found.append(issue("warning", "clocks held down: " + ", ".join(slow)))
    return found


def _count(value: str | None) -> int:
    return int(value) if value and value.isdigit() else 0


def _yes(value: str | None) -> bool:
    return (value or "").lower() in ("yes", "1")


def _active(row: dict[str, str], reason: str) -> bool:
    for prefix in ("clocks_event_reasons.", "clocks_throttle_reasons."):
        if row.get(prefix + reason, "").lower() == "active":
            return True
    return False


def _said(out: str, err: str) -> str:
    return " ".join(ln.strip() for ln in (out + "\n" + err).splitlines() if ln.strip())[:TEXT_MAX]


def _ended(code: int) -> str:
    """`exit 15`, `killed by SIGTERM`: how a read that failed ended."""
    if code >= 0:
        return "exit {}".format(code)
    try:
        return "killed by {}".format(signal.Signals(-code).name)
    except ValueError:
        return "killed by signal {}".format(-code)


def _read_said(n: int, code: int | None, timeout: float, **streams: str) -> str:
    """`nvidia-smi read 2: killed by SIGTERM (not by ddptui); stdout ''; stderr ''`: how a read
    ended, and what it said on each stream named."""
    if code is None:
        end = "no answer in {:g} s (killed)".format(timeout)
    else:
        end = _ended(code) + (" (not by ddptui)" if code < 0 else "")
    said = [_quoted(name, text) for name, text in streams.items()]
    return "; ".join(["nvidia-smi read {}: {}".format(n, end), *said])


def _quoted(name: str, text: str) -> str:
    """`row '0, 00000000:18:00.0, 0'`: raw, bounded, control characters escaped (repr)."""
    cut = text[:EVIDENCE_MAX]
    return "{} {!r}{}".format(name, cut, "..." if len(text) > EVIDENCE_MAX else "")


def _lost_bus(text: str) -> str | None:
    """`Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error`: the bus id."""
    m = re.search(r"GPU ?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])", text)
    return m.group(1) if m else None


# -- the kernel log ------------------------------------------------------------------------------


def kernel_log(kmsg: str | None = KMSG, journalctl: str | None = "journalctl",
               since: float | None = None, run: Run | None = None
               ) -> tuple[str | None, list[str], str | None]:  # fmt: skip
    """(where it was read, its Xid lines, why it could not be). journalctl first: the journal
    keeps the whole boot where the kernel's ring buffer may have dropped old lines; then the
    ring buffer itself (kmsg None: not). Both need root, adm/systemd-journal or
    kernel.dmesg_restrict 0."""
    run = run or OwnCommands().run
    why = []
    journalctl = journalctl and shutil.which(journalctl)
    if journalctl:
        argv = [journalctl, "-k", "-b", "-q", "--no-pager", "-o", "cat"]
        if since is not None:  # a run's watch reads every few seconds: not the boot's every time
            argv += ["--since", "@{}".format(int(since))]
        code, out, err = run(argv, LOG_TIMEOUT)
        lines = out[-LOG_MAX:].splitlines()
        # since: the journal was read before (a run's watch), so nothing new is an answer
        if code == 0 and (lines or since is not None) and "not seeing messages" not in err:
            return "journalctl -k", [ln for ln in lines if "Xid" in ln], None
        silent = "no answer in {:g} s".format(LOG_TIMEOUT) if code is None else "nothing read"
        why.append("journalctl -k: " + (_said("", err) or silent))
    if kmsg is not None:
        try:
            return kmsg, [ln for ln in _kmsg_lines(kmsg) if "Xid" in ln], None
        except OSError as exc:
            why.append("{}: {}".format(kmsg, exc.strerror))
    return None, [], "; ".join(why)[:TEXT_MAX]


def _kmsg_lines(path: str) -> list[str]:
    """The kernel's ring buffer as it is now, without waiting for more: a non-blocking read
    ends where the buffer does. A record is `pri,seq,time,flags;message`, followed by
    ` KEY=value` lines."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks, size = [], 0
    try:
        while size < LOG_MAX:
            try:
                chunk = os.read(fd, 8192)  # one record a read from the device
            except BrokenPipeError:  # records overwritten while we read: go on with the next
                continue
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    text = b"".join(chunks).decode("utf-8", "replace")
    return [_KMSG_HEAD.sub("", ln) for ln in text.splitlines() if not ln.startswith(" ")]


_KMSG_HEAD = re.compile(r"^\d+,\d+,\d+,[^;]*;")


def xid_issues(lines: list[str], gpus: dict[int, str]) -> list[Any]:
    """One issue per GPU and Xid, with how many times it came and its last words. gpus:
    {index: nvidia-smi's bus id}, which names the GPU the kernel names by its own bus id."""
    known = {_bus_key(bus): (index, bus) for index, bus in gpus.items()}
    seen: dict[tuple[str, int], list[Any]] = {}
    for line in lines:
        m = _XID.search(line)
        if not m or int(m.group(2)) in XID_IGNORED:
            continue
        bus, xid = m.group(1), int(m.group(2))
        entry = seen.setdefault((bus, xid), [0, "", ""])
        entry[0] += 1
        entry[1], entry[2] = _xid_words(m.group(3)), line
    issues = []
    for (bus, xid), (times, words, last) in seen.items():
        level = "failure" if xid in XID_FAILURES else "warning"
        what = "Xid {}{}{}".format(xid, " ({} times)".format(times) if times > 1 else "",
                                   ": " + words if words else "")  # fmt: skip
        index, named = known.get(_bus_key(bus), (None, bus))
        issues.append(_issue(level, "kernel", what, index, named, "xid {}".format(xid), times,
                             [_quoted("kernel log", last)]))  # fmt: skip
    return issues


def _xid_words(rest: str) -> str:
    """`pid=1234, name=python, GPU has fallen off the bus.` → `GPU has fallen off the bus.`"""
    parts = [p.strip() for p in rest.split(",")]
    return ", ".join(p for p in parts if p and not re.match(r"^(pid|name|Ch|channel)\b", p))


def _bus_key(bus: str) -> tuple[int, int, int]:
    """`0000:3b:00` (the kernel's) and `00000000:3B:00.0` (nvidia-smi's) name one GPU."""
    parts = bus.split(".")[0].split(":")
    try:
        return int(parts[-3], 16), int(parts[-2], 16), int(parts[-1], 16)
    except (IndexError, ValueError):
        return -1, -1, -1


# -- InfiniBand ----------------------------------------------------------------------------------


def ib_ports(root: str = SYS_IB) -> list[dict[str, Any]]:
    """Every port under root: its state (`4: ACTIVE`) and counters/link_downed."""
    ports = []
    for device in _listdir(root):
        where = os.path.join(root, device, "ports")
        for port in _listdir(where):
            state = _read(os.path.join(where, port, "state"))
            downed = _read(os.path.join(where, port, "counters", "link_downed"))
            count = int(downed) if downed and downed.isdigit() else None
            ports.append({"device": device, "port": port, "state": state, "link_downed": count})
    return ports


def ib_issues(ports: list[dict[str, Any]]) -> list[Any]:
    """Warnings before a launch: a port not ACTIVE may be one left uncabled on purpose, and
    link_downed counts since the counters were last cleared; what changes during a run is
    what fails it."""
    issues = []
    for p in ports:
        name = "{} port {}".format(p["device"], p["port"])
        if "ACTIVE" not in (p["state"] or ""):
            issues.append(_issue("warning", "infiniband", "{} is {}".format(
                name, p["state"] or "unreadable")))  # fmt: skip
        if p["link_downed"]:
            issues.append(_issue("warning", "infiniband", "{}: link_downed {}".format(
                name, p["link_downed"])))  # fmt: skip
    return issues


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()[:TEXT_MAX]
    except OSError:
        return None
