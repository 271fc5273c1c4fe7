"""Launcher overhead: one 4-host job by `ddptui --headless launch` and by pdsh + torchrun,
on quick logins and on login shells slowed by --login-delay seconds; then one host whose login
shell takes --slow-host seconds, launched once with default settings. With --containers: the
same launch with every node's job in a podman container, against the launch without.

    .venv/bin/python scripts/bench_launch.py [--reps 3] [--warmup 1] [--hosts 4] [--nproc 1]
                                             [--login-delay 4] [--slow-host 75] [--containers]
                                             [--testhosts PREFIX:SUBNET]

Brings up ssh test hosts (prefix ddptb, 10.213.9.0/24; --testhosts picks another), runs each
variant --warmup times untimed (a fresh host's first launch reads torch, podman and the image
from disk: seconds, once), then alternates the variants, rotating which goes first. The pdsh
baseline is how DeepSpeed's pdsh runner starts a job: one pdsh over every host, `%n` (pdsh's
rank of the host in the list) as the node rank, the environment exported inline. It runs
exactly the torchrun command ddptui plans, with the same environment (the interface variables
set to the hosts' eth0, which ddptui's supervisor resolves per host), its ranks on the console
as a user runs it (`--tee 3`). Each run must end with every rank done.

Targets (issue "One host agent"): ddptui with its checks / pdsh + torchrun <= 1.00 on quick
logins; a login shell slowed by D seconds adds at most 1.5 D to ddptui's launch with checks;
one host whose shell takes 75 s: the launch succeeds with default settings. Issue "Jobs in
containers": a launch in containers takes at most 1.5 s longer than the same launch without.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from bench_common import (
    HOST_IFNAME,
    PREFIX,
    REPO,
    SUBNET,
    Timed,
    cluster,
    ddptui_command,
    load,
    login_delay,
    median,
    planned,
    replace_arg,
    require_pdsh,
    round_name,
    shell_line,
    table,
    tail,
    timed,
    workspace,
    write_inventory,
)
from testhosts import TestCluster

from ddptui.remote import inventory

BASELINE = "pdsh + torchrun"
BASE_PORT = 29710
BARE, BOXED = "ddptui", "ddptui in containers"
CONTAINER_EXTRA_S = 1.5  # target: what containers add to a launch, at most


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3, help="runs of each variant (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--nproc", type=int, default=1, help="processes per host (default 1)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--step-time", default="0.1", help="seconds per step (train.py)")
    p.add_argument("--keep", action="store_true", help="keep logs and outputs")
    p.add_argument("--login-delay", type=float, default=4.0, help="seconds (0: not measured)")
    p.add_argument("--slow-host", type=float, default=75.0, help="seconds (0: not measured)")
    p.add_argument("--containers", action="store_true", help="in containers against without")
    p.add_argument(
        "--testhosts",
        default=os.environ.get("DDPTUI_TESTHOSTS", f"{PREFIX}:{SUBNET}"),
        help="PREFIX:SUBNET of the test hosts (default: DDPTUI_TESTHOSTS, else the benchmarks')",
    )
    args = p.parse_args(argv)
    if args.containers:
        return containers(args)
    require_pdsh()
    with (
        workspace("launch", args.keep) as work,
        cluster(args.hosts, work / "hosts", testhosts=args.testhosts) as c,
    ):
        quick = bench(args, c, work / "quick")
        if quick is None:
            return 1
        failed = report(quick, "quick logins", target=1.00)
        if args.login_delay:
            login_delay(c, args.login_delay)
            slow = bench(args, c, work / "slow")
            login_delay(c, 0)
            if slow is None:
                return 1
            report(slow, f"login shells slowed by {args.login_delay:g} s", target=None)
            failed |= added(quick, slow, args.login_delay)
        if args.slow_host:
            failed |= one_slow_host(args, c, work / "slow-host")
        print(load())
        return 1 if failed else 0


def bench(args: argparse.Namespace, c: TestCluster, work: Path) -> dict[str, list[Timed]] | None:
    work.mkdir()
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
    for rep in range(-args.warmup, args.reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            port = next_port()
            run += 1
            inv = inventory_for(c, work / f"inv-{run}.yaml", args, port)
            argv = variants[name](inv, port)
            if name.startswith("ddptui"):
                argv += ["--run-dir", str(work / f"run-{run}")]
            env = c.pdsh_env()
            res = timed(argv, work / f"out-{run}.txt", work / f"err-{run}.txt", env=env)
            if not counted(rep, name, res, args):
                return None
            if rep >= 0:
                times[name].append(res)
    return times


_port = iter(range(BASE_PORT, BASE_PORT + 1000))


def next_port() -> int:
    """One port per run: a fresh rendezvous never meets the last one's sockets."""
    return next(_port)


def counted(rep: int, name: str, res: Timed, args: argparse.Namespace) -> bool:
    """Print one run (a warm-up's rep is negative: not counted); False when it failed."""
    print(f"  {round_name(rep):<7} {name:<22} {res.wall:7.2f} s  exit {res.code}", flush=True)
    if every_rank_done(res, args):
        return True
    print(f"bench: {name} failed (exit {res.code}):\n{tail(res.err)}")
    return False


def every_rank_done(res: Timed, args: argparse.Namespace) -> bool:
    """The load it claims: exit 0, every rank's greeting (`rank R/W on ...`) and rank 0's
    `done` after the last epoch (examples/train.py)."""
    world = args.hosts * args.nproc
    lines = res.out.read_bytes().splitlines()
    greeted = sum(f"/{world} on ".encode() in line for line in lines)
    done = sum(line.endswith(b"done") for line in lines)
    return res.code == 0 and greeted == world and done == 1


def added(quick: dict[str, list[Timed]], slow: dict[str, list[Timed]], delay: float) -> bool:
    """What the slowed login shells added to each variant; False when ddptui's is in bounds."""
    print(f"\nwhat login shells slowed by {delay:g} s added (median wall):")
    failed = False
    for name in quick:
        extra = median([t.wall for t in slow[name]]) - median([t.wall for t in quick[name]])
        line = f"  {name:<22} {extra:+6.2f} s = {extra / delay:.2f} D"
        if name == "ddptui":
            ok = extra <= 1.5 * delay
            line += f" (target <= 1.5 D: {'met' if ok else 'NOT met'})"
            failed = not ok
        print(line)
    return failed


def one_slow_host(args: argparse.Namespace, c: TestCluster, work: Path) -> bool:
    """One host whose login shell takes --slow-host seconds; default settings: it launches."""
    work.mkdir()
    login_delay(c, args.slow_host, hosts=[len(c.hosts) - 1])
    try:
        inv = inventory_for(c, work / "inv.yaml", args, next_port())
        argv = [*ddptui_command(), "--headless", "launch", "-i", str(inv)]
        argv += ["--run-dir", str(work / "run")]
        res = timed(argv, work / "out.txt", work / "err.txt", env=c.pdsh_env(), timeout=900)
    finally:
        login_delay(c, 0)
    ok = every_rank_done(res, args)
    print(
        f"\none host's login shell takes {args.slow_host:g} s: ddptui launched in "
        f"{res.wall:.1f} s, exit {res.code} (target: it succeeds: {'met' if ok else 'NOT met'})"
    )
    if not ok:
        print(tail(res.err))
    return not ok


def containers(args: argparse.Namespace) -> int:
    """The same launch (checks included) with and without every job in a container."""
    with (
        workspace("launch-containers", args.keep) as work,
        cluster(args.hosts, work / "hosts", containers=True, testhosts=args.testhosts) as c,
    ):
        print(f"{args.hosts} hosts x {args.nproc} proc, {args.reps} reps; {load()}", flush=True)
        times = in_turns(args, c, work)
        print(load())
    if times is None:
        return 1
    diffs = [b - a for a, b in zip(times[BARE], times[BOXED], strict=True)]
    extra = median(diffs)
    rows = [[n, f"{median(t):.2f}", f"{min(t):.2f}", f"{max(t):.2f}"] for n, t in times.items()]
    print(table(["variant", "median s", "min s", "max s"], rows))
    # The training job's own run time spreads a rep by a second or more either way: the
    # quartiles say how far the median can be trusted (--reps 11 for a verdict).
    if len(diffs) >= 2:
        q1, _, q3 = statistics.quantiles(diffs, n=4)
        print(f"each rep's difference: quartiles {q1:+.2f} / {q3:+.2f} s over {len(diffs)} reps; "
              + " ".join(f"{d:+.2f}" for d in diffs))  # fmt: skip
    met = extra <= CONTAINER_EXTRA_S
    print(f"containers add {extra:+.2f} s a launch (median of each rep's difference; ratio "
          f"{median(times[BOXED]) / median(times[BARE]):.3f}; target <= {CONTAINER_EXTRA_S} s: "
          f"{'met' if met else 'NOT met'})")  # fmt: skip
    return 0 if met else 1


def in_turns(args: argparse.Namespace, c: TestCluster, work: Path) -> dict[str, list[float]] | None:
    """Each rep launches both ways back to back, the first of them alternating."""
    times: dict[str, list[float]] = {BARE: [], BOXED: []}
    for rep in range(-args.warmup, args.reps):
        for name in (BARE, BOXED)[:: 1 if rep % 2 == 0 else -1]:
            run = f"{rep}-{'boxed' if name == BOXED else 'bare'}"
            inv = inventory_for(c, work / f"inv-{run}.yaml", args, next_port(), name == BOXED)
            argv = [*ddptui_command(), "--headless", "launch", "-i", str(inv)]
            argv += ["--run-dir", str(work / f"run-{run}")]
            res = timed(argv, work / f"out-{run}.txt", work / f"err-{run}.txt")
            if not counted(rep, name, res, args):
                return None
            if rep >= 0:
                times[name].append(res.wall)
    return times


def inventory_for(
    c: TestCluster, path: Path, args: argparse.Namespace, port: int, boxed: bool = False
) -> Path:
    defaults = {**c.inventory_defaults(), "workdir": str(REPO)}
    if boxed:
        defaults["container"] = c.container_defaults()
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


def report(times: dict[str, list[Timed]], what: str, target: float | None) -> bool:
    """Medians, and the ratio two ways: of the medians, and the median of each rep's pair
    (variants of a rep ran back to back, so a pair shares the machine's load of the moment).
    True when ddptui's ratio misses the target."""
    base = [t.wall for t in times[BASELINE]]
    rows = []
    for name, runs in times.items():
        walls = [t.wall for t in runs]
        pairs = [a / b for a, b in zip(walls, base, strict=True)]
        extra = [a - b for a, b in zip(walls, base, strict=True)]
        rows.append(
            [
                name,
                f"{median(walls):.2f}",
                f"{min(walls):.2f}",
                f"{max(walls):.2f}",
                f"{median([t.cpu for t in runs]):.2f}",
                f"{median(extra):+.2f}",
                f"{median(walls) / median(base):.3f}",
                f"{median(pairs):.3f}",
            ]
        )
    header = ["variant", "median s", "min s", "max s", "CPU s", "extra s", "ratio", "pair ratio"]
    print(f"\n{what}")
    print(table(header, rows))
    print(
        f"ratio: median / median of {BASELINE}; pair ratio: median of each rep's ratio; "
        "extra: median of each rep's difference\nCPU: the launching process and its children on "
        "this machine (pdsh: pdsh and its ssh clients)"
    )
    if target is None:
        return False
    ratio = median([t.wall for t in times["ddptui"]]) / median(base)
    met = ratio <= target
    print(f"ddptui (checks included) / {BASELINE}: {ratio:.3f} (target <= {target:.2f}: "
          f"{'met' if met else 'NOT met'})")  # fmt: skip
    return not met


if __name__ == "__main__":
    sys.exit(main())
