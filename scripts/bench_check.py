"""Checks before launch: `ddptui --headless check` against pdsh running the same probe, and the
live GPU figures from every host's agent.

    .venv/bin/python scripts/bench_check.py [--hosts 32] [--reps 3] [--rounds 5]

Brings up ssh test hosts (prefix ddptb, 10.213.9.0/24), each with the recorded 8x H100
nvidia-smi stand-in on its PATH. The pdsh baseline runs, on every host, the very probe the
agent's `probe` op runs (the host code as ddptui keeps it there), fanned out to all hosts at once
(-f HOSTS); the check is the whole `ddptui` process: start-up, the agents, probing, the table.
The variants alternate, rotating which goes first. Prints median wall times and the ratio
ddptui / pdsh (target: <= 0.8), then how the monitors' samples come in: every host's first
after listening, then every host's next (a round; the monitors sample every 2 s).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from bench_common import (
    PROBE_MARK,
    REPO,
    TestCluster,
    Timed,
    cluster,
    ddptui_command,
    install_code,
    median,
    probe_line,
    require_pdsh,
    table,
    tail,
    timed,
    workspace,
    write_inventory,
)
from nvidia_smi import H100_BUSY, stand_in

from ddptui.remote import inventory
from ddptui.remote.events import Event, GpuStats
from ddptui.remote.run.runner import fleet_for

JOB = {"script": "examples/train.py", "nproc_per_node": "auto"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=32)
    p.add_argument("--reps", type=int, default=3, help="runs of each variant (default 3)")
    p.add_argument("--rounds", type=int, default=5, help="GPU sample rounds (default 5)")
    p.add_argument("--keep", action="store_true", help="keep logs and outputs")
    args = p.parse_args(argv)
    require_pdsh()
    with workspace("check", args.keep) as work, cluster(args.hosts, work / "hosts") as c:
        for i in range(args.hosts):
            c.put_tool(i, "nvidia-smi", stand_in(H100_BUSY))
        return bench(args, c, work)


def bench(args: argparse.Namespace, c: TestCluster, work: Path) -> int:
    hosts = [{"host": h.addr, "name": h.name} for h in c.hosts]
    defaults = {**c.inventory_defaults(), "workdir": str(REPO)}
    inv_path = work / "inventory.yaml"
    inv = write_inventory(inv_path, hosts, defaults, JOB)
    # The probe as the master's agent runs it; pdsh runs that on every host.
    install_code(c)
    line = probe_line(inv, c.hosts[0].addr, str(REPO))
    variants = {
        "ddptui check": [*ddptui_command(), "--headless", "check", "-i", str(inv_path)],
        "pdsh probe": ["pdsh", "-f", str(args.hosts), "-w", f"node[0-{args.hosts - 1}]", line],
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for rep in range(args.reps):
        order = list(variants)
        order = order[rep % len(order) :] + order[: rep % len(order)]
        for name in order:
            slug = name.replace(" ", "-")
            env = c.pdsh_env() if name.startswith("pdsh") else None
            res = timed(
                variants[name], work / f"{slug}-{rep}.out", work / f"{slug}-{rep}.err", env=env
            )
            if not answered_by_all(name, res, args.hosts):
                print(f"bench: {name} failed (exit {res.code}):\n{tail(res.err)}\n{tail(res.out)}")
                return 1
            times[name].append(res.wall)
            print(f"  rep {rep + 1}: {name:<13} {res.wall:6.2f} s wall, {res.cpu:6.2f} s CPU")
    ours, theirs = median(times["ddptui check"]), median(times["pdsh probe"])
    rounds = asyncio.run(refresh_rounds(inv, args.rounds))
    print()
    print(
        table(
            ["", "median wall (s)", "runs"],
            [[n, f"{median(t):.2f}", " ".join(f"{x:.2f}" for x in t)] for n, t in times.items()],
        )
    )
    print(f"\ncheck across {args.hosts} hosts: ddptui / pdsh = {ours / theirs:.2f} (target <= 0.8)")
    first, *rest = rounds
    print(
        f"GPU figures of {args.hosts} hosts from their monitors: every host's first sample "
        f"{first:.2f} s after listening (agents up), then a round every "
        f"{median(rest):.2f} s (median of {len(rest)}; the monitors sample every 2 s)"
    )
    return 0


def answered_by_all(name: str, res: Timed, n: int) -> bool:
    """Every host answered: a table row each (ddptui), a probe line each (pdsh)."""
    out = res.out.read_text(errors="replace")
    if name.startswith("pdsh"):
        return out.count(PROBE_MARK.decode()) == n
    rows = [line for line in out.splitlines() if line.startswith("node")]
    return res.code == 0 and len(rows) == n


async def refresh_rounds(inv: inventory.Inventory, rounds: int) -> list[float]:
    """Seconds until every host's monitor has sent one more sample, round after round."""
    fleet = fleet_for(inv)
    await asyncio.gather(*(fleet.agent(k, lambda e: None) for k in range(len(inv.hosts))))
    counts = [0] * len(inv.hosts)
    done = asyncio.Event()
    want = 1

    def emit(event: Event) -> None:
        if isinstance(event, GpuStats):
            if len(event.gpus) != 8:
                raise SystemExit("bench: a host sent a sample without its 8 GPUs")
            counts[event.node_rank] += 1
            if min(counts) >= want:
                done.set()

    took = []
    try:
        fleet.listen(emit)
        for want in range(1, rounds + 1):  # noqa: B007 (emit reads it)
            t0 = time.monotonic()
            done.clear()
            await asyncio.wait_for(done.wait(), 30)
            took.append(time.monotonic() - t0)
        return took
    finally:
        await fleet.close()


if __name__ == "__main__":
    sys.exit(main())
