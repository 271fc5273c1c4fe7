"""Checks before launch: `ddptui --headless check` against pdsh running the same probe, and the
live GPU refresh over open connections.

    .venv/bin/python scripts/bench_check.py [--hosts 32] [--reps 3] [--rounds 20]

Brings up ssh test hosts (prefix ddptb, 10.213.9.0/24), each with the recorded 8x H100
nvidia-smi stand-in on its PATH. The pdsh baseline runs, on every host, exactly the one command
ddptui's probe sends (remote/probe.py `command`), fanned out to all hosts at once (-f HOSTS);
the check is the whole `ddptui` process: start-up, connecting, probing, the table. The variants
alternate, rotating which goes first. Prints median wall times and the ratio ddptui / pdsh (the
issue's target: <= 0.8), then the time of one GPU refresh round over already open connections
(target: < 0.5 s for 32 hosts).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from bench_common import (
    REPO,
    TestCluster,
    Timed,
    cluster,
    ddptui_command,
    median,
    require_pdsh,
    table,
    tail,
    timed,
    workspace,
    write_inventory,
)
from nvidia_smi import H100_BUSY, stand_in

from remote import inventory, probe
from remote.transport import SSHTransport

JOB = {"script": "examples/train.py", "nproc_per_node": "auto"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=32)
    p.add_argument("--reps", type=int, default=3, help="runs of each variant (default 3)")
    p.add_argument("--rounds", type=int, default=20, help="GPU refresh rounds (default 20)")
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
    # The probe as ddptui sends it to the master; pdsh sends that to every host.
    master = inv.hosts[0]
    line = probe.shell_command(probe.command(master, inv.job, c.hosts[0].addr, str(REPO), True))
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
    print(
        f"GPU refresh of {args.hosts} hosts over open connections: median "
        f"{median(rounds):.3f} s per round, max {max(rounds):.3f} s ({len(rounds)} rounds; "
        "target < 0.5 s)"
    )
    return 0


def answered_by_all(name: str, res: Timed, n: int) -> bool:
    """Every host answered: a table row each (ddptui), a probe line each (pdsh)."""
    out = res.out.read_text(errors="replace")
    if name.startswith("pdsh"):
        return out.count(probe.MARK) == n
    rows = [line for line in out.splitlines() if line.startswith("node")]
    return res.code == 0 and len(rows) == n


async def refresh_rounds(inv: inventory.Inventory, rounds: int) -> list[float]:
    """Per-round seconds of the live refresh: every host's GPU query over its open connection."""
    transports = [SSHTransport(h) for h in inv.hosts]
    await asyncio.gather(*(t.connect() for t in transports))
    try:
        took = []
        for _ in range(rounds):
            t0 = time.monotonic()
            stats = await asyncio.gather(*(probe.gpu_stats(t) for t in transports))
            took.append(time.monotonic() - t0)
            if any(s is None or len(s.gpus) != 8 for s in stats):
                raise SystemExit("bench: a host did not answer the GPU query")
        return took
    finally:
        await asyncio.gather(*(t.close() for t in transports))


if __name__ == "__main__":
    sys.exit(main())
