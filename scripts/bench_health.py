"""A GPU failing mid-run: how soon the attempt ends after the failure is visible on the host.

    .venv/bin/python scripts/bench_health.py [--reps 3] [--testhosts PREFIX:SUBNET]

Two ssh test hosts (default prefix ddptb, 10.213.9.0/24; $DDPTUI_TESTHOSTS or --testhosts picks
others) run examples/train.py under torchrun (gloo, one
rank each, restarts 0). node1 has the recorded 8x H100 nvidia-smi stand-in on its PATH and a
journalctl stand-in reading a file of its own. Once every rank runs, and after a random wait (the
failure falls anywhere in the watch's 4 s between reads), one failure is written on node1:

    ecc   GPU 3's uncorrectable ECC count rises (nvidia-smi's answer changes)
    xid   the kernel log gets an Xid 79 for GPU 2 (off the bus)
    lost  two GPUs answer ERR! / [GPU is lost]
    hang  nvidia-smi stops answering (the watch's read times out at 8 s: fail closed)

From that instant it times, by the launcher's events as they are written: `seen` (node1's
supervisor says the failure), `node` (node1's job has ended) and `run` (every node's job has
ended: the peers' ranks stopped too). Each run must end failed with node1's GPU as the cause,
else the benchmark fails (it did not produce the failure it claims); so must any `node` past
15 s. Prints each case's median and worst.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench_common import REPO, cluster, ddptui_command, median, table, workspace, write_inventory
from nvidia_smi import DATA, H100_BUSY, stand_in

TARGET_S = 15.0
JOB = {"script": "examples/train.py", "nproc_per_node": 1, "master_port": 29661,
       "args": ["--epochs", "1000", "--step-time", "0.05"], "stop_grace": 2}  # fmt: skip
XID = "kernel: NVRM: Xid (PCI:0000:3a:00): 79, pid=4242, name=python3, GPU has fallen off the bus."
CAUSES = {
    "ecc": "GPU 3 (00000000:5D:00.0) on node1: 2 uncorrectable ECC errors",
    "xid": "GPU 2 (00000000:3A:00.0) on node1: Xid 79: GPU has fallen off the bus.",
    "lost": "GPU 3 (00000000:5D:00.0) on node1: cannot be read: nvidia-smi answers ERR!",
    "hang": "node1: GPUs cannot be read: nvidia-smi did not answer in 8 s",
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3, help="runs of each case (default 3)")
    p.add_argument("--cases", default=",".join(CAUSES), help="which (default: all)")
    p.add_argument("--testhosts", default=os.environ.get("DDPTUI_TESTHOSTS", "ddptb:10.213.9"))
    p.add_argument("--keep", action="store_true", help="keep logs and outputs")
    args = p.parse_args(argv)
    with (
        workspace("health", args.keep) as work,
        cluster(2, work / "hosts", False, args.testhosts) as c,
    ):
        machine, journal = work / "h100", work / "journal.txt"
        c.put_tool(1, "nvidia-smi", stand_in(str(machine)))
        c.put_tool(1, "journalctl", f"#!/bin/sh\ncat {journal}\n")
        hosts = [{"host": h.addr, "name": h.name} for h in c.hosts]
        inv = work / "inventory.yaml"
        write_inventory(inv, hosts, {**c.inventory_defaults(), "workdir": str(REPO)}, JOB)
        rows, failed = [], []
        for case in args.cases.split(","):
            times: list[dict[str, float]] = []
            for rep in range(args.reps):
                shutil.rmtree(machine, ignore_errors=True)
                shutil.copytree(DATA / H100_BUSY, machine)
                journal.write_text("kernel: Linux version 6.8.0-49-generic\n")
                took, why = one(case, inv, work / f"{case}-{rep}", machine, journal)
                print(f"{case} {rep}: {took}", flush=True)
                if why:
                    failed.append(f"{case} {rep}: {why}")
                times.append(took)
            rows.append(row(case, times))
        header = ["case", "seen (median, max s)", "node ended", "run ended"]
        print(table(header, rows))
        for line in failed:
            print("FAILED", line)
        return 1 if failed else 0


def one(case: str, inv: Path, run_dir: Path, machine: Path, journal: Path
        ) -> tuple[dict[str, float], str]:  # fmt: skip
    """One run, one failure: its times, and what went wrong (empty: nothing)."""
    argv = [*ddptui_command(), "--headless", "launch", "-i", str(inv), "--run-dir", str(run_dir)]
    with (run_dir.parent / f"{run_dir.name}.err").open("w") as err:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
    try:
        if not until(lambda: ranks_running(run_dir), 120):
            return {}, "the ranks never ran"
        time.sleep(random.uniform(0, 4))  # anywhere in the watch's interval
        began = inject(case, machine, journal)
        seen = follow(run_dir / "events.jsonl", began, CAUSES[case])
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    summary = json.loads((run_dir / "summary.json").read_text())
    cause = (summary.get("failure") or {}).get("message")
    if summary["status"] != "failed" or cause != CAUSES[case]:
        return seen, f"ended {summary['status']}, the cause {cause!r}"
    if seen.get("node", TARGET_S + 1) > TARGET_S:
        return seen, f"node1's job ended {seen.get('node')} s after the failure: past {TARGET_S} s"
    return seen, ""


def inject(case: str, machine: Path, journal: Path) -> float:
    if case == "ecc":
        shutil.copy(DATA / "health" / "ecc" / "health.csv", machine / "health.csv")
    elif case == "lost":
        shutil.copy(DATA / "health" / "lost" / "health.csv", machine / "health.csv")
    elif case == "hang":
        (machine / "hang").write_text("")
    else:
        with journal.open("a") as f:
            f.write(XID + "\n")
    return time.monotonic()


def follow(events: Path, began: float, cause: str) -> dict[str, float]:
    """The launcher's events as they are written, each timed from `began`, until the run ends."""
    seen: dict[str, float] = {}
    with events.open() as f:
        buf = ""
        while "run" not in seen and time.monotonic() - began < 120:
            got = f.read()
            if not got:
                time.sleep(0.02)
                continue
            buf += got
            lines, _, buf = buf.rpartition("\n")
            at = round(time.monotonic() - began, 2)
            for line in lines.splitlines():
                e = json.loads(line)
                kind = e["event"]
                if kind == "Notice" and e["text"] == cause:
                    seen.setdefault("seen", at)
                elif kind == "NodeExited" and e["host"] == "node1":
                    seen.setdefault("node", at)
                elif kind == "RunFinished":
                    seen["run"] = at
    return seen


def ranks_running(run_dir: Path) -> bool:
    """Rank 0 has finished an epoch (an all-reduce a step with rank 1 on node1)."""
    log = run_dir / "rank-0.log"
    return log.exists() and "epoch 1:" in log.read_text()


def until(cond: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False


def row(case: str, times: list[dict[str, float]]) -> list[str]:
    def fig(key: str) -> str:
        got = [t[key] for t in times if key in t]
        return f"{median(got):.1f}, {max(got):.1f}" if got else "-"

    return [case, fig("seen"), fig("node"), fig("run")]


if __name__ == "__main__":
    sys.exit(main())
