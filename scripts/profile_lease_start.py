"""Where a launch's start goes, from its GPUs leased to every node running, on bench_lease.py's
hosts and job: each node's supervisor's word that its job started and its rank's first line of
Python, against the lease, and the CPU each kind of process used meanwhile (from /proc: processes
alive at the end, and what each reaped), beside the whole machine's.

    .venv/bin/python scripts/profile_lease_start.py [--hosts 32] [--queued]
                                                     [--testhosts PREFIX:SUBNET]

--queued: the launch waits in the queue behind a run that holds every GPU, which is then told
to end (bench_lease.py's queue measure): the window is from that run's last node's end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import bench_lease
from bench_common import load

from ddptui.remote.events import NodeExited
from ddptui.remote.run import gang as gangmod
from ddptui.remote.run import nodemsg
from ddptui.remote.run.runner import Run

TICK = os.sysconf("SC_CLK_TCK")
Procs = dict[int, tuple[str, float, float]]  # pid → (command line, its CPU s, its reaped's)


def processes() -> Procs:
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()
                cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except (OSError, UnicodeDecodeError):
                continue
            own, reaped = int(stat[11]) + int(stat[12]), int(stat[13]) + int(stat[14])
            found[int(name)] = (cmd, own / TICK, reaped / TICK)
    return found


def machine() -> tuple[float, float]:
    """(busy, idle) CPU seconds of the whole machine so far."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / TICK, (f[3] + f[4]) / TICK


def kind(cmd: str, pid: int) -> str:
    if pid == os.getpid():
        return "launcher (asyncssh in it)"
    if cmd.startswith("sshd"):
        return "sshd"
    if "leasejob" in cmd:
        return "rank"
    if "boot.daemon" in cmd or "ddptui-prefork" in cmd:
        return "supervisor (and its guardian)"
    if "python" in cmd:
        return "agent"
    return "other"


class Window:
    """The CPU used between `open` and `close`."""

    def open(self) -> None:
        self.t0, self.procs, self.stat = time.time(), processes(), machine()

    def close(self) -> None:
        self.t1, after, stat = time.time(), processes(), machine()
        self.busy, self.idle = stat[0] - self.stat[0], stat[1] - self.stat[1]
        self.use: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for pid, (cmd, cpu, reaped) in after.items():
            was = self.procs.get(pid, (cmd, 0.0, 0.0))
            row = self.use[kind(cmd, pid)]
            row[0] += cpu - was[1]
            row[1] += reaped - was[2]
            row[2] += 1


async def launch(inv: Path, out: Path, hosts: int, queued: bool, slow: float) -> None:
    if slow:
        asyncio.get_running_loop().slow_callback_duration = slow
    heard: dict[int, tuple[float, float]] = {}  # node → (its Started's host time, heard)
    original = gangmod.Gang._message

    def message(self: gangmod.Gang, node: Any, link: Any, msg: Any, at: float) -> None:
        if isinstance(msg, nodemsg.Started):
            heard[node.node_rank] = (at, time.time())
        original(self, node, link, msg, at)

    gangmod.Gang._message = message  # type: ignore[method-assign]
    window = Window()
    clock = bench_lease.Clock()
    first = bench_lease.Clock()
    a = None
    if queued:  # a run holding every GPU, told to end once the profiled one waits
        a = Run(bench_lease.with_go(inv, out, "go-a"), first, run_dir=out / "a")
        ta = asyncio.ensure_future(a.execute())
        await bench_lease.until_running(ta, first, hosts, "the first run")
        inv = inv.with_suffix(".b.yaml")  # its processes niced, as bench_lease.py's
    run = Run(bench_lease.with_go(inv, out, "go-b"), clock, run_dir=out / "b",
              wait=float("inf") if queued else None)  # fmt: skip
    step = run.launch.lease
    leased = 0.0

    async def lease(nprocs: list[int]) -> bool:
        nonlocal leased
        ok = await step(nprocs)
        leased = time.time()
        if not queued:
            window.open()
        return ok

    run.launch.lease = lease  # type: ignore[method-assign]
    task = asyncio.ensure_future(run.execute())
    if a is not None:
        while not clock.said("waiting for GPUs"):
            await asyncio.sleep(0.05)
        ended = [0]

        def exited(event: Any) -> None:
            first(event)
            ended[0] += isinstance(event, NodeExited)
            if isinstance(event, NodeExited) and ended[0] == hosts:
                window.open()

        a._emit_to = exited  # the first run's events, heard: its last node's end opens it
        (out / "go-a").touch()
    await bench_lease.until_running(task, clock, hosts, "the profiled run")
    window.close()
    (out / "go-b").touch()
    await task
    if a is not None:
        await ta
    notes = bench_lease.noted(out, run.run_id, hosts, "the profiled run")
    t0 = window.t0
    said = sorted(at - t0 for at, _ in heard.values())
    got = sorted(h - t0 for _, h in heard.values())
    ranks = sorted(s - t0 for s, _ in notes)

    def q(xs: list[float]) -> str:
        return f"first {xs[0]:.2f}, median {statistics.median(xs):.2f}, last {xs[-1]:.2f}"

    start = "the first run's last node's end" if queued else "its lease"
    print(f"{hosts} hosts, from {start} (s); the lease at {leased - t0:.2f}:")
    print(f"  each supervisor said its job started (host clock): {q(said)}")
    print(f"  heard by the launcher: {q(got)}")
    print(f"  each rank's first line of Python (its note): {q(ranks)}")
    print(f"  every node running (heard): {window.t1 - t0:.2f}")
    span = window.t1 - t0
    print(f"the machine in those {span:.2f} s: busy {window.busy:.2f} CPU-s, idle "
          f"{window.idle:.2f} (of {2 * span:.2f}); {load()}")  # fmt: skip
    print("CPU s of the processes alive at its end, by kind (and what each reaped meanwhile):")
    for name, (cpu, reaped, n) in sorted(window.use.items(), key=lambda kv: -kv[1][0]):
        print(f"  {name:30} {cpu:6.2f} ({n:.0f} processes; {1000 * cpu / hosts:5.1f} ms a "
              f"host); reaped {reaped:.2f}")  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=32)
    p.add_argument("--queued", action="store_true")
    p.add_argument("--testhosts", default="ddptb:10.213.9")
    p.add_argument(
        "--slow",
        type=float,
        default=0.0,
        help="say each callback of the launcher's loop that ran this long (s)",
    )
    args = p.parse_args()
    with bench_lease.rig(args.hosts, args.testhosts, "leaseprof", False) as (work, out):
        if args.slow:
            import logging

            logging.basicConfig(level=logging.WARNING)
        asyncio.run(launch(work / "inv.yaml", out, args.hosts, args.queued, args.slow),
                    debug=bool(args.slow))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
