"""A soak of the GPU health watch on healthy hosts: it must never fail one (issue 42).

    nice .venv/bin/python scripts/soak_health.py [--duration 3600] [--testhosts PREFIX:SUBNET]
                                                 [--summary FILE] [--keep]

Two ssh test hosts (default prefix ddptb, 10.213.9.0/24; $DDPTUI_TESTHOSTS or --testhosts picks
others), each with a healthy nvidia-smi stand-in on its PATH (node0: the recorded 8x H100; node1:
the 4x A100 of an older driver, which refuses the newest field names, so every read there asks
twice) and a journalctl of its own. Two lanes run on the same hosts at once, for `--duration`:

    runs    `ddptui --headless launch` back to back (its checks, then examples/train.py under
            torchrun, gloo, a few seconds); every second run's rank 1 fails at step 3, so its
            peer is stopped and swept while its watch reads. Right after each run ends, a
            `check` on the same hosts at once: the shape of the first sighting (a check's
            nvidia-smi killed by the end of the job before it)
    checks  `ddptui --headless check` back to back, its reads meeting the runs' ends and starts

A false GPU failure is a run with a GPU verdict (any attempt failed naming a GPU, nvidia-smi or
the health watch, carrying a health read's evidence, or a host marked bad), or a check with a
failed gpu finding or one naming a GPU that cannot be read: there must be none. A run must end as
planned (succeeded, or failed by rank 1's error). It fails too if it did not make the load it
claims: runs and checks per minute under their floors, or fewer health reads (each counted by
the stand-in) than each check and each run's checks and watch make. A line per run as it goes;
the last line (also written to --summary) says runs, checks, false failures and runs a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench_common import REPO, cluster, ddptui_command, workspace, write_inventory
from nvidia_smi import A100, H100_BUSY, stand_in

JOB = {"script": "examples/train.py", "nproc_per_node": 1, "master_port": "auto",
       "args": ["--epochs", "1", "--step-time", "0.05"], "stop_grace": 2}  # fmt: skip
FAILING = ["--fail-rank", "1", "--fail-step", "3"]
GPU_WORDS = ("cannot be read", "GPU ", "gpu-health", "by health", "nvidia-smi")
# Floors: on the shared 2-core machine (load ~18) a run took ~90 s and a check ~25 s.
RUNS_PER_MIN, CHECKS_PER_MIN = 0.3, 2.0
TIMEOUT_S = 300  # one launch or check; past it, it counts as not as planned


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=3600.0, help="seconds (default 3600)")
    p.add_argument("--testhosts", default=os.environ.get("DDPTUI_TESTHOSTS", "ddptb:10.213.9"))
    p.add_argument("--summary", type=Path, help="write the final summary line here too")
    p.add_argument("--keep", action="store_true", help="keep logs and outputs")
    args = p.parse_args(argv)
    with (
        workspace("soak", args.keep) as work,
        cluster(2, work / "hosts", False, args.testhosts) as c,
    ):
        asked = work / "asked"
        for i, machine in enumerate((H100_BUSY, A100)):
            recorded = c.put_tool(i, "recorded-nvidia-smi", stand_in(machine))
            c.put_tool(i, "nvidia-smi", counting(recorded, asked))
            c.put_tool(i, "journalctl", "#!/bin/sh\necho 'kernel: Linux version 6.8.0'\n")
        hosts = [{"host": h.addr, "name": h.name} for h in c.hosts]
        defaults = {**c.inventory_defaults(), "workdir": str(REPO)}
        invs = [work / "inv.yaml", work / "inv-failing.yaml"]
        for inv, extra in zip(invs, ([], FAILING), strict=True):
            write_inventory(inv, hosts, defaults, {**JOB, "args": JOB["args"] + extra})
        soak = Soak(work, invs, args.duration, args.keep)
        checker = threading.Thread(target=soak.checks)
        checker.start()
        soak.runs()
        checker.join()
        return soak.report(read_count(asked), args.summary)


def counting(recorded: Path, asked: Path) -> str:
    """The stand-in, each health query (the watch's and the checks') a line in `asked`."""
    return (f"#!/bin/sh\ncase \"$*\" in --query-gpu=index,pci.bus_id,*) "
            f"echo >> {shlex.quote(str(asked))} ;; esac\n"
            f'exec {shlex.quote(str(recorded))} "$@"\n')  # fmt: skip


def read_count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def gpu_verdict(summary: dict[str, Any]) -> str:
    """What in a run's summary.json blames a GPU or its health; '' when nothing does."""
    failures = [summary.get("failure")] + [a.get("failure") for a in summary.get("attempts", [])]
    for failure in filter(None, failures):
        said = json.dumps(failure)
        if failure.get("evidence") or any(word in said for word in GPU_WORDS):
            return said[:400]
    return f"bad hosts {summary['bad_hosts']}" if summary.get("bad_hosts") else ""


def check_verdict(done: dict[str, Any]) -> list[str]:
    """A check's failed gpu findings, and any finding naming a GPU that cannot be read."""
    return [f"{f['host']} {f['check']}: {f['message']}" for f in done.get("findings", [])
            if (f["level"] == "failure" and f["check"].startswith("gpu"))
            or "cannot be read" in f["message"]]  # fmt: skip


class Soak:
    def __init__(self, work: Path, invs: list[Path], duration: float, keep: bool) -> None:
        self.work, self.invs, self.duration, self.keep = work, invs, duration, keep
        self.argv = ddptui_command()
        self.t0 = time.monotonic()
        self.ran = self.checked = self.after = 0  # after: checks right after a run's end
        self.false: list[str] = []  # false GPU failures
        self.wrong: list[str] = []  # anything else not as planned
        self.lock = threading.Lock()

    def going(self) -> bool:
        return time.monotonic() - self.t0 < self.duration

    def say(self, line: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.0f} s] {line}", flush=True)

    def runs(self) -> None:
        while self.going():
            n = self.ran + 1
            failing = n % 2 == 0
            try:
                said = self.run(n, failing)
            except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
                said = self.note(self.wrong, f"run {n}: {type(e).__name__}: {e}")
            self.ran = n
            self.check(f"check after run {n}")
            with self.lock:
                self.after += 1
            self.say(f"run {n} {said}; {self.checked} checks; {len(self.false)} false GPU "
                     f"failures, {len(self.wrong)} other")  # fmt: skip

    def run(self, n: int, failing: bool) -> str:
        run_dir = self.work / f"run-{n}"
        argv = [*self.argv, "--headless", "launch", "-i", str(self.invs[failing]),
                "--run-dir", str(run_dir)]  # fmt: skip
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S)
        summary = json.loads((run_dir / "summary.json").read_text())
        failure = summary.get("failure") or {}
        got = (summary["status"], failure.get("host"))
        blamed = gpu_verdict(summary)
        if blamed:
            return self.note(self.false, f"run {n}: {blamed}")
        if got != (("failed", "node1") if failing else ("succeeded", None)):
            return self.note(self.wrong, f"run {n}: {got} {json.dumps(failure)[:300]} "
                                         f"{done.stderr[-300:]}")  # fmt: skip
        if not self.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
        return f"{got[0]} as planned"

    def checks(self) -> None:
        while self.going():
            self.check("check")

    def check(self, what: str) -> None:
        argv = [*self.argv, "--headless", "check", "--json", "-i", str(self.invs[0])]
        try:
            done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True,
                                  timeout=TIMEOUT_S)  # fmt: skip
            found = json.loads(done.stdout)
        except (ValueError, subprocess.TimeoutExpired) as e:
            self.note(self.wrong, f"{what}: {type(e).__name__}: {str(e)[:200]}")
            return
        finally:
            with self.lock:
                self.checked += 1
        if check_verdict(found):
            self.note(self.false, f"{what}: {check_verdict(found)}")
        elif done.returncode or not found.get("ok"):
            fails = [f["message"] for f in found.get("findings", []) if f["level"] == "failure"]
            self.note(self.wrong, f"{what}: exit {done.returncode} {fails} {done.stderr[-300:]}")

    def note(self, where: list[str], line: str) -> str:
        with self.lock:
            where.append(line)
        self.say(("FALSE " if where is self.false else "OTHER ") + line)
        return "NOT as planned"

    def report(self, reads: int, summary_to: Path | None) -> int:
        minutes = (time.monotonic() - self.t0) / 60
        short = []
        if self.ran < RUNS_PER_MIN * minutes or self.checked < CHECKS_PER_MIN * minutes:
            short.append(f"under {RUNS_PER_MIN:g} runs and {CHECKS_PER_MIN:g} checks a minute")
        if reads < 4 * self.ran + 2 * self.checked:  # each launch's checks and watch, each check
            short.append(f"{reads} health reads: the checks and watches did not all read")
        for why in short:
            self.say(f"FAILED: the load it claims was not made: {why}")
        verdict = "FAILED" if self.false or self.wrong or short else "passed"
        rates = f"{self.ran / minutes:.2f} runs/min, {self.checked / minutes:.2f} checks/min"
        line = (f"soak {verdict}: {minutes:.1f} min, {self.ran} runs, {self.checked} checks "
                f"({self.after} right after a run), {reads} health reads, {rates}; "
                f"{len(self.false)} false GPU failures, {len(self.wrong)} other")  # fmt: skip
        print(line, flush=True)
        if summary_to is not None:
            summary_to.write_text(line + "\n")
        return 0 if verdict == "passed" else 1


if __name__ == "__main__":
    sys.exit(main())
