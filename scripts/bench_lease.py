"""GPU leases' cost: what the lease step takes of a launch, and how soon a queued run starts once
the run before it ends.

    .venv/bin/python scripts/bench_lease.py [--hosts 4] [--reps 3] [--warmup 1]
                                            [--testhosts PREFIX:SUBNET] [--keep]

Brings up ssh test hosts (prefix ddptb, 10.213.9.0/24; --testhosts picks another), each with an
nvidia-smi stand-in (one H200 of its own: tests/data/nvidia-smi) and its leases in a directory of
its own, as each real host has its own /dev/shm (sharing this machine's, 128 hosts would share one
lock and one queue: each waiting host would read every host's tickets), and launches in-process (the
engine's Run, as `ddptui --headless launch` does) a light job of one rank per host, started
directly (launcher: env; tests/support/leasejob.py without torch: each rank holds its GPU until
told). `--hosts 128` is the scale run (scripts/scale_test.sh's hosts; not in CI, minutes long).

- Cost: what the leases add to a launch, against the baseline it is part of, the whole launch
  (from its start, checks included, until every node's job runs), as a ratio. Target (issue
  "Share the cluster"): <= 2 % of the launch. Each host is asked for its node's GPUs as soon as
  its own checks have answered, while the others' go on; the launch then waits, after the
  checks, only for the answers not in yet. Two measures of it:
  - the lease step: that wait (from the checks' end, the launch's lease step begun, until every
    host's answer is in and judged): the time the launch spends on leases that it would not
    spend without them. Before the early asks it was the whole round trip to every host;
  - with against without: the same launch with its leases taken and with none (no host asked,
    no lease in any node's spec), alternated within each round; the difference of the two
    launches' medians also holds what the early asks cost the checks (on this rig every host's
    CPU is the launcher's), but at 128 hosts its noise is the size of the target.
- Queue: run A holds every host's GPU; run B is launched with --wait and queues; A is told to
  end. Time from A's last node's end (its supervisor's word) to B's every node running, each as
  the launcher hears it; beside it, B's own launch's time from its lease to every node running
  (what a start takes with no queue). Target: <= 2 s.

Each round checks the load it claims (or the bench fails): every host leased and started (none
in the launch without leases), the lease step timed once, B said it waited, and every rank of
both runs noted its GPU, B's never before A's had ended.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench_common import REPO, cluster, load, round_name, table, workspace, write_inventory

from ddptui.remote import inventory
from ddptui.remote.events import Event, NodeExited, NodeStarted, Notice, RunFinished
from ddptui.remote.run.runner import Run

COST_TARGET = 0.02  # the lease step's share of a launch, at most
QUEUE_TARGET_S = 2.0  # a run's end to the next queued run's start, at most
NICE = '#!/bin/sh\nexec nice -n 10 {python} "$@"\n'  # the queued run's python


class Clock:
    """A run's events, each with when it was heard (monotonic)."""

    def __init__(self) -> None:
        self.heard: list[tuple[float, Event]] = []

    def __call__(self, event: Event) -> None:
        self.heard.append((time.monotonic(), event))

    def when(self, kind: type, last: bool = False) -> float:
        times = [t for t, e in self.heard if isinstance(e, kind)]
        assert times, f"no {kind.__name__} heard"
        return max(times) if last else min(times)

    def said(self, text: str) -> bool:
        return any(isinstance(e, Notice) and text in e.text for _, e in self.heard)


def timed_lease(run: Run) -> list[float]:
    """The run's lease step, timed (its start and end)."""
    step = run.launch.lease
    spans: list[float] = []

    async def lease(nprocs: list[int]) -> bool:
        spans.append(time.monotonic())
        try:
            return await step(nprocs)
        finally:
            spans.append(time.monotonic())

    run.launch.lease = lease  # type: ignore[method-assign]
    return spans


def no_leases(run: Run) -> None:
    """The run launched as it would be without leases: no host asked, no node's spec with one."""

    async def lease(nprocs: list[int]) -> bool:
        return True

    run.preflight.on_checked = None
    run.launch.lease = lease  # type: ignore[method-assign]


async def one_launch(inv_path: Path, out: Path, rep: str, hosts: int,
                     leased: bool = True) -> tuple[float, float, float]:  # fmt: skip
    """(lease step, launch, its lease to every node running) seconds of one launch, its job
    told to end once every node runs. Not `leased`: its leases left out, only the launch."""
    clock = Clock()
    run = Run(with_go(inv_path, out, f"go-{rep}"), clock, run_dir=out / rep)
    if not leased:
        no_leases(run)
    spans = timed_lease(run)
    t0 = time.monotonic()
    task = asyncio.ensure_future(run.execute())
    await until_running(task, clock, hosts, rep)
    (out / f"go-{rep}").touch()
    check(await task, clock, hosts, rep, leased)
    if len(spans) != 2:
        raise SystemExit(f"bench: {rep}: the lease step ran {len(spans) // 2} times, not once")
    noted(out, run.run_id, hosts, rep, leased)
    running = clock.when(NodeStarted, last=True)
    return spans[1] - spans[0], running - t0, running - spans[1]


async def queued(inv_path: Path, out: Path, rep: str, hosts: int) -> tuple[float, float]:
    """(A's end to queued B's every node running, B's lease to every node running) seconds.
    B's processes run niced (its inventory's python: NICE): its 128 logins and checks, all on
    this rig's 2 cores, would starve A's health reads (8 s, fail closed), and A would end on
    it; on real hosts each has only its own."""
    (out / f"go-{rep}-b").touch()
    first, second = Clock(), Clock()
    a = Run(with_go(inv_path, out, f"go-{rep}-a"), first, run_dir=out / f"{rep}-a")
    b = Run(with_go(inv_path.with_suffix(".b.yaml"), out, f"go-{rep}-b"), second,
            run_dir=out / f"{rep}-b", wait=float("inf"))  # fmt: skip
    ta = asyncio.ensure_future(a.execute())
    await until_running(ta, first, hosts, f"{rep} (first)")
    tb = asyncio.ensure_future(b.execute())
    while not second.said("waiting for GPUs"):
        if ta.done():  # the load claimed: A holds every GPU until B waits for them
            raise SystemExit(f"bench: {rep}: the first run ended before the second queued: "
                             f"{how_ended(ta.result())}")  # fmt: skip
        if tb.done():
            said = [e.text for _, e in second.heard if isinstance(e, Notice)]
            raise SystemExit(f"bench: {rep}: the second run never queued: "
                             f"{how_ended(tb.result())}; it said: {said}")  # fmt: skip
        await asyncio.sleep(0.05)
    (out / f"go-{rep}-a").touch()
    check(await ta, first, hosts, f"{rep} (first)")
    check(await tb, second, hosts, f"{rep} (queued)")
    ends = noted(out, a.run_id, hosts, f"{rep} (first)")
    starts = noted(out, b.run_id, hosts, f"{rep} (queued)")
    if min(s for s, _ in starts) < max(e for _, e in ends):
        raise SystemExit(f"bench: {rep}: the queued run's ranks ran before the first's had ended")
    ended = first.when(NodeExited, last=True)
    leased = min(t for t, e in second.heard if isinstance(e, Notice) and "leased" in e.text)
    running = second.when(NodeStarted, last=True)
    return running - ended, running - leased


async def until_running(task: asyncio.Future[RunFinished], clock: Clock, hosts: int,
                        rep: str) -> None:  # fmt: skip
    while sum(isinstance(e, NodeStarted) for _, e in clock.heard) < hosts:
        if task.done():
            raise SystemExit(f"bench: {rep}: over before all ran: {how_ended(task.result())}")
        await asyncio.sleep(0.05)


def how_ended(fin: RunFinished) -> str:
    """How a run ended, in one line: its status and its first failure (of how many)."""
    first = f": {fin.failure.host}: {fin.failure.message}" if fin.failure else ""
    return f"{fin.status}{first} ({len(fin.failures)} failure(s))"


def check(fin: RunFinished, clock: Clock, hosts: int, rep: str, leased: bool = True) -> None:
    """The load claimed: every host's GPU leased (none, not `leased`), every node started,
    the run succeeded."""
    said = [e.text for _, e in clock.heard if isinstance(e, Notice) and "leased" in e.text]
    started = sum(isinstance(e, NodeStarted) for _, e in clock.heard)
    if fin.status != "succeeded" or started != hosts or len(said) != int(leased):
        raise SystemExit(f"bench: {rep}: {how_ended(fin)}, {started}/{hosts} nodes, {said}")
    if leased and f"on node[0-{hosts - 1}]" not in said[0]:
        raise SystemExit(f"bench: {rep}: not every host leased: {said[0]}")


def noted(out: Path, run_id: str, hosts: int, rep: str,
          leased: bool = True) -> list[tuple[float, float]]:  # fmt: skip
    """Each rank's (start, end), as it noted them: one per host, each on the GPU leased (none
    named, not `leased`)."""
    notes = [json.loads(p.read_text()) for p in out.glob(f"{run_id}-r*.json")]
    gpus = {n["cvd"] for n in notes}
    if len(notes) != hosts or gpus != ({"0"} if leased else {None}):
        raise SystemExit(f"bench: {rep}: {len(notes)}/{hosts} ranks noted, on GPU(s) {gpus}")
    return [(n["start"], n["end"]) for n in notes]


def with_go(path: Path, out: Path, go: str) -> inventory.Inventory:
    """The bench's inventory, its ranks holding their GPUs until OUT/GO exists."""
    inv = inventory.load(path)
    job = inv.job.model_copy(update={"args": [str(out), go]})
    return dataclasses.replace(inv, job=job)


@contextmanager
def rig(hosts: int, testhosts: str, name: str, keep: bool) -> Iterator[tuple[Path, Path]]:
    """The test hosts, each with a stand-in H200 and a lease directory of its own, and the
    bench's inventories in a workspace: (workspace, the ranks' notes dir). WORK/inv.yaml is the
    job; WORK/inv.b.yaml the same job with the queued run's python niced (NICE)."""
    if hosts > 32:  # this rig's sshds share its 2 cores: a login may wait its turn
        from ddptui.remote.agents import transport

        transport.CONNECT_TIMEOUT = 60.0
    import nvidia_smi  # tests/support, on the path once bench_common is imported

    with (
        workspace(name, keep) as work,
        cluster(hosts, work / "hosts", testhosts=testhosts, lease_dirs=True) as c,
    ):
        for i in range(hosts):
            c.put_tool(i, "nvidia-smi", nvidia_smi.stand_in(nvidia_smi.H200))
        out = work / "out"
        out.mkdir()
        defaults = {**c.inventory_defaults(), "workdir": str(REPO)}
        defaults["env"] = {**defaults.get("env", {}), "LEASEJOB_GROUP": "0"}  # no torch
        job = {"script": "tests/support/leasejob.py", "args": [str(out), "go"],
               "launcher": "env", "nproc_per_node": "auto", "master_port": "auto"}  # fmt: skip
        named = [{"host": h.addr, "name": h.name} for h in c.hosts]
        write_inventory(work / "inv.yaml", named, defaults, job)
        niced = work / "nice-python"
        niced.write_text(NICE.format(python=defaults["python"]))
        niced.chmod(0o755)
        write_inventory(work / "inv.b.yaml", named, {**defaults, "python": str(niced)}, job)
        yield work, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--reps", type=int, default=3, help="rounds of each measure (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    p.add_argument("--keep", action="store_true", help="keep logs and outputs")
    p.add_argument("--testhosts", default="ddptb:10.213.9", help="PREFIX:SUBNET of the hosts")
    args = p.parse_args(argv)
    with rig(args.hosts, args.testhosts, "lease", args.keep) as (work, out):
        costs, queues = asyncio.run(rounds(work / "inv.yaml", out, args))
    report(costs, queues, args.hosts)
    if len(costs) != args.reps or len(queues) != args.reps:
        raise SystemExit(f"bench: {len(costs)} rounds measured, not {args.reps}")
    cost_ok = statistics.median(c[0] / c[1] for c in costs) <= COST_TARGET
    queue_ok = statistics.median(q for q, _ in queues) <= QUEUE_TARGET_S
    return 0 if cost_ok and queue_ok else 1


Cost = tuple[float, float, float, float]  # lease step, launch, its lease → running; no leases
Queue = tuple[float, float]  # end → queued run running; its lease → running


async def rounds(inv: Path, out: Path, args: argparse.Namespace) -> tuple[list[Cost], list[Queue]]:
    costs: list[Cost] = []
    queues: list[Queue] = []
    for rep in range(-args.warmup, args.reps):
        name = round_name(rep).replace(" ", "")
        bare = f"{name}-bare"
        if rep % 2:  # which goes first alternates: the machine's drift is in neither alone
            without = (await one_launch(inv, out, bare, args.hosts, leased=False))[1]
            cost = await one_launch(inv, out, f"{name}-cost", args.hosts)
        else:
            cost = await one_launch(inv, out, f"{name}-cost", args.hosts)
            without = (await one_launch(inv, out, bare, args.hosts, leased=False))[1]
        wait = await queued(inv, out, f"{name}-queue", args.hosts)
        print(f"{round_name(rep)}: lease {cost[0]:.3f} s of a {cost[1]:.2f} s launch ("
              f"{without:.2f} s without leases; then {cost[2]:.2f} s to running); end to queued "
              f"run's start {wait[0]:.2f} s (its lease to running {wait[1]:.2f} s) ({load()})",
              file=sys.stderr)  # fmt: skip
        if rep >= 0:
            costs.append((*cost, without))
            queues.append(wait)
    return costs, queues


def report(costs: list[Cost], queues: list[Queue], hosts: int) -> None:
    added = [(t - bare) / bare for _, t, _, bare in costs]  # each round's pair
    rows = [row(f"rep {i + 1}", c, a, q)
            for i, (c, a, q) in enumerate(zip(costs, added, queues, strict=True))]  # fmt: skip
    med = statistics.median
    cost = tuple(med(c[i] for c in costs) for i in range(4))
    queue = (med(q for q, _ in queues), med(b for _, b in queues))
    rows.append(row("median", cost, med(added), queue))
    header = ["", "lease s", "launch s", "lease / launch", "no leases: launch s",
              "with - without", "its lease → running s", "end → queued run s",
              "queued: its lease → running s"]  # fmt: skip
    print(f"{hosts} hosts, one rank (one GPU) each")
    print(table(header, rows))
    print(f"targets: lease / launch <= {COST_TARGET:.0%}; a run's end → the queued run running "
          f"<= {QUEUE_TARGET_S:g} s")  # fmt: skip


def row(name: str, cost: tuple[float, ...], added: float, queue: Queue) -> list[str]:
    (s, t, r, bare), (q, b) = cost, queue
    return [name, f"{s:.3f}", f"{t:.2f}", f"{s / t:.1%}", f"{bare:.2f}", f"{added:+.1%}",
            f"{r:.2f}", f"{q:.2f}", f"{b:.2f}"]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
