"""Launcher overhead: one 4-host job by `ddptui --headless launch` and by pdsh + torchrun.

    .venv/bin/python scripts/bench_launch.py [--reps 3] [--hosts 4] [--nproc 1]

Brings up ssh test hosts (prefix ddptb, 10.213.9.0/24), then alternates the variants, rotating
which goes first. The pdsh baseline is how DeepSpeed's pdsh runner starts a job: one pdsh over
every host, `%n` (pdsh's rank of the host in the list) as the node rank, the environment
exported inline. It runs exactly the torchrun command ddptui plans, with the same environment
(the interface variables set to the hosts' eth0, which ddptui's supervisor resolves per host).
Prints median wall times and the ratio ddptui / pdsh (the issue's target: <= 1.05).
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from bench_common import (
    HOST_IFNAME,
    REPO,
    Timed,
    cluster,
    ddptui_command,
    load,
    median,
    planned,
    replace_arg,
    require_pdsh,
    shell_line,
    table,
    tail,
    timed,
    workspace,
    write_inventory,
)
from testhosts import TestCluster

from remote import inventory

BASELINE = "pdsh + torchrun"
BASE_PORT = 29710  # one port per run: a fresh rendezvous never meets the last one's sockets


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3, help="runs of each variant (default 3)")
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--nproc", type=int, default=1, help="processes per host (default 1)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--step-time", default="0.1", help="seconds per step (train.py)")
    p.add_argument("--keep", action="store_true", help="keep logs and outputs")
    args = p.parse_args(argv)
    require_pdsh()
    with workspace("launch", args.keep) as work, cluster(args.hosts, work / "hosts") as c:
        return bench(args, c, work)


def bench(args: argparse.Namespace, c: TestCluster, work: Path) -> int:
    ddptui = ddptui_command()
    help_text = subprocess.run([*ddptui, "--help"], capture_output=True, text=True, cwd=REPO).stdout
    variants: dict[str, Callable[[Path, int], list[str]]] = {
        BASELINE: lambda inv, port: pdsh_argv(c, inv, port, work),
        "ddptui": lambda inv, port: [*ddptui, "--headless", "launch", "-i", str(inv)],
    }
    if "--skip-checks" in help_text:
        variants["ddptui --skip-checks"] = lambda inv, port: [
            *ddptui,
            "--headless",
            "launch",
            "-i",
            str(inv),
            "--skip-checks",
        ]
    names = list(variants)
    times: dict[str, list[Timed]] = {name: [] for name in names}
    job_text = f"examples/train.py --epochs {args.epochs} --step-time {args.step_time}"
    print(
        f"{args.hosts} hosts x {args.nproc} proc, {job_text}, {args.reps} reps; {load()}",
        flush=True,
    )
    run = 0
    for rep in range(args.reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            port = BASE_PORT + run
            run += 1
            inv = inventory_for(c, work / f"inv-{run}.yaml", args, port)
            argv = variants[name](inv, port)
            if name.startswith("ddptui"):
                argv += ["--run-dir", str(work / f"run-{run}")]
            env = c.pdsh_env()
            res = timed(argv, work / f"out-{run}.txt", work / f"err-{run}.txt", env=env)
            ok = res.code == 0 and b"done" in res.out.read_bytes()
            print(f"  rep {rep + 1} {name:<22} {res.wall:7.2f} s  exit {res.code}", flush=True)
            if not ok:
                print(f"bench: {name} failed (exit {res.code}):\n{tail(res.err)}")
                return 1
            times[name].append(res)
    report(times, names)
    print(load())
    return 0


def inventory_for(c: TestCluster, path: Path, args: argparse.Namespace, port: int) -> Path:
    defaults = {**c.inventory_defaults(), "workdir": str(REPO)}
    hosts = [{"host": h.addr, "name": h.name} for h in c.hosts]
    job = {
        "script": "examples/train.py",
        "args": ["--epochs", str(args.epochs), "--step-time", str(args.step_time)],
        "nproc_per_node": args.nproc,
        "master_port": port,
    }
    write_inventory(path, hosts, defaults, job)
    return path


def pdsh_argv(c: TestCluster, inv_path: Path, port: int, logs: Path) -> list[str]:
    """pdsh over all hosts; node 0's planned command with pdsh's %n as the node's rank."""
    inv = inventory.load(inv_path)
    node = planned(inv, f"pdsh-{port}", [h.addr for h in c.hosts]).nodes[0]
    node = replace_arg(node, "--node-rank", "%n")
    node = replace_arg(node, "--log-dir", f"{logs}/pdsh-{port}-n%n")  # gone with the work dir
    node = dataclasses.replace(node, env={**node.env, "NODE_RANK": "%n"})
    return ["pdsh", "-w", f"node[0-{len(c.hosts) - 1}]", shell_line(node, HOST_IFNAME, str(REPO))]


def report(times: dict[str, list[Timed]], names: list[str]) -> None:
    """Medians, and the ratio two ways: of the medians, and the median of each rep's pair
    (variants of a rep ran back to back, so a pair shares the machine's load of the moment)."""
    base = [t.wall for t in times[BASELINE]]
    rows = []
    for name in names:
        walls = [t.wall for t in times[name]]
        pairs = [a / b for a, b in zip(walls, base, strict=True)]
        extra = [a - b for a, b in zip(walls, base, strict=True)]
        rows.append(
            [
                name,
                f"{median(walls):.2f}",
                f"{min(walls):.2f}",
                f"{max(walls):.2f}",
                f"{median([t.cpu for t in times[name]]):.2f}",
                f"{median(extra):+.2f}",
                f"{median(walls) / median(base):.3f}",
                f"{median(pairs):.3f}",
            ]
        )
    header = ["variant", "median s", "min s", "max s", "CPU s", "extra s", "ratio", "pair ratio"]
    print()
    print(table(header, rows))
    print(
        f"ratio: median / median of {BASELINE}; pair ratio: median of each rep's ratio; "
        "extra: median of each rep's difference; target: ratio <= 1.05\n"
        "CPU: the launching process and its children on this machine "
        "(pdsh: pdsh and its ssh clients)"
    )


if __name__ == "__main__":
    sys.exit(main())
