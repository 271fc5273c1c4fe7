"""128 hosts: `check` and a light launch by ddptui against pdsh doing the same work, on quick
logins and on a slow shared home; and the logins alone at several fan-outs.

    .venv/bin/python scripts/bench_scale.py [--hosts 128] [--reps 3] [--warmup 1]
                                            [--testhosts PREFIX:SUBNET]
                                            [--slow-home 0.1]

Brings up ssh test hosts (by default the benchmarks' own prefix; DDPTUI_TESTHOSTS or
--testhosts pick another), written in the inventory as one range (`host: "10.x.y.[11-138]"`).
Each host has its own HOME, so root's ~/.bashrc here (pyenv init, which queues every command
on one lock) is not what is measured; the slow home is made on purpose instead:
every host's .bashrc holds one lock shared by all of them for --slow-home seconds, as conda init
on a busy network home does. pdsh runs with -f 32, its default fan-out.

- check: `ddptui --headless check` against pdsh running, on every host, the very probe the
  agent's `probe` op runs (the host code as ddptui keeps it there).
- launch: `ddptui --headless launch` with its checks and default settings, of a light job (the
  `env` style, tests/data/light_job.py: no torch), against pdsh running the same command with
  the same environment, `%n` as NODE_RANK (how DeepSpeed's pdsh runner starts a job). Targets
  (issue "One host agent"): on quick logins ddptui / pdsh <= 0.8, on the slow home <= 1.3.
- logins: every host logged into over asyncssh through remote/agents/fanout.py, at several fan-outs.
- resolve (no test hosts; --resolve N runs just this): what asking OpenSSH costs a launch,
  `ssh -G` for N names at once (remote/agents/openssh.py, as the hosts' logins ask it), the
  machine's ssh_config as it is; its wall time and CPU per launch, against a 128-host launch's.
- dashboard (no test hosts; --dashboard alone runs just this): 256 hosts and 2,048 ranks from
  the tests' scripted fakes (tests/support/apptools.py) under Textual's Pilot at 120x40; each key's
  latency is from the key event to the app idle again with its result drawn (scrolling the
  host table and the views list, `/` searches, view switches).

Each variant runs --warmup times untimed first, then the variants alternate, rotating which
goes first; prints medians and the ratios ddptui / pdsh.
Each run's machine CPU is every process's (/proc/stat), the test hosts' sshd and jobs included:
where all the hosts share a few cores, both sides are CPU-bound and this is what decides.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench_common import (
    HOST_IFNAME,
    PREFIX,
    PROBE_MARK,
    REPO,
    SUBNET,
    Timed,
    ddptui_command,
    install_code,
    load,
    login_delay,
    median,
    planned,
    probe_line,
    require_pdsh,
    round_name,
    shell_line,
    table,
    tail,
    timed,
    workspace,
    write_inventory,
)
from testhosts import FIRST_HOST_OCTET, TestCluster

from ddptui.remote import inventory
from ddptui.remote.agents import fanout, openssh
from ddptui.remote.agents.sshtransport import SSHTransport

SCRIPT = REPO / "tests" / "data" / "light_job.py"
HELLO = b"hello from node"
PDSH_FANOUT = 32
TARGETS = {"quick logins": 0.8, "slow home": 1.3}  # launch: ddptui / pdsh at most


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=128)
    p.add_argument("--reps", type=int, default=3, help="runs of each variant (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    p.add_argument(
        "--testhosts",
        default=os.environ.get("DDPTUI_TESTHOSTS", f"{PREFIX}:{SUBNET}"),
        help="PREFIX:SUBNET of the test hosts (default: DDPTUI_TESTHOSTS, else the benchmarks')",
    )
    p.add_argument(
        "--fanouts", default="16,32,64,128", help="fan-outs of the logins alone ('': none)"
    )
    p.add_argument("--keep", action="store_true", help="keep logs and outputs")
    p.add_argument("--dashboard", action="store_true", help="the dashboard's keys alone")
    p.add_argument("--resolve", type=int, metavar="N", help="ssh -G for N hosts at once, alone")
    p.add_argument("--only", choices=["check", "launch"], help="this variant alone")
    p.add_argument("--home", choices=["quick", "slow"], help="these logins alone")
    p.add_argument("--timeline", action="store_true", help="each launch's events timed (--keep)")
    p.add_argument("--no-dashboard", action="store_true", help="skip the dashboard's keys")
    p.add_argument(
        "--slow-home", type=float, default=0.1, help="seconds each login holds the shared lock"
    )
    args = p.parse_args(argv)
    if args.dashboard:
        return dashboard()
    if args.resolve:
        return resolve(args.resolve, args.reps)
    require_pdsh()
    prefix, _, subnet = args.testhosts.partition(":")
    with (
        workspace("scale", args.keep) as work,
        TestCluster(args.hosts, root=work / "hosts", prefix=prefix, subnet=subnet) as c,
    ):
        return bench(args, c, work)


def bench(args: argparse.Namespace, c: TestCluster, work: Path) -> int:
    n = args.hosts
    inv_path = work / "inventory.yaml"
    last = FIRST_HOST_OCTET + n - 1
    hosts = [{"host": f"{c.subnet}.[{FIRST_HOST_OCTET}-{last}]", "name": f"node[0-{n - 1}]"}]
    job = {"script": str(SCRIPT), "launcher": "env", "master_port": 29651}
    inv = write_inventory(inv_path, hosts, {**c.inventory_defaults(), "workdir": str(REPO)}, job)
    install_code(c)  # pdsh's probe runs the host code as ddptui keeps it on each host
    every = ["pdsh", "-f", str(PDSH_FANOUT), "-w", f"node[0-{n - 1}]"]
    ddptui = [*ddptui_command(), "--headless"]
    launcher = ddptui
    if args.timeline:  # scripts/timeline.py: the events of each launch, timed, in work/
        launcher = [sys.executable, str(REPO / "scripts" / "timeline.py"), "TIMELINE", "--",
                    "--headless"]  # fmt: skip
    variants = {
        "check": {
            "ddptui check": [*ddptui, "check", "-i", str(inv_path)],
            "pdsh probe": [*every, probe_line(inv, c.hosts[0].addr, str(REPO))],
        },
        "launch": {
            "ddptui launch": [*launcher, "launch", "-i", str(inv_path)],
            "pdsh launch": [*every, launch_line(inv, c)],
        },
    }
    if args.only:
        variants = {args.only: variants[args.only]}
    homes = [("quick logins", 0.0), ("slow home", args.slow_home)]
    if args.home:
        homes = [h for h in homes if h[0].startswith(args.home)]
    print(f"{n} test hosts, {args.reps} reps, pdsh -f {PDSH_FANOUT}; {load()}", flush=True)
    ratios, missed = [], []
    for home, delay in homes:
        login_delay(c, delay, lock=work / "home.lock")
        (work / home.replace(" ", "-")).mkdir()
        print(f"\n{home}" + (f": every login holds one lock for {delay:g} s" if delay else ""))
        for what, runs in variants.items():
            times = measure(runs, args, c, work / home.replace(" ", "-"), n)
            if times is None:
                return 1
            ours, theirs = (median([t.wall for t in ts]) for ts in times.values())
            print(
                table(
                    ["", "median wall (s)", "CPU (s)", "machine CPU (s)", "runs"],
                    [
                        [
                            name,
                            f"{median([t.wall for t in ts]):.2f}",
                            f"{median([t.cpu for t in ts]):.2f}",
                            f"{median([t.busy for t in ts]):.2f}",
                            " ".join(f"{t.wall:.2f}" for t in ts),
                        ]
                        for name, ts in times.items()
                    ],
                )
            )
            ratio = ours / theirs
            line = f"{what} across {n} hosts, {home}: ddptui / pdsh = {ratio:.2f}"
            if what == "launch":
                ok = ratio <= TARGETS[home]
                line += f" (target <= {TARGETS[home]}: {'met' if ok else 'NOT met'})"
                if not ok:
                    missed.append(line)
            ratios.append(line)
            print(ratios[-1] + "\n", flush=True)
    login_delay(c, 0)
    if args.fanouts:
        logins = login_times(inv, [int(f) for f in args.fanouts.split(",")])
        print("logins alone (asyncssh through remote/agents/fanout.py), seconds for all hosts:")
        print("  " + ", ".join(f"fan-out {f}: {s:.2f} s" for f, s in logins.items()))
    print("\n".join(ratios))
    print(load())
    if not args.no_dashboard:
        dashboard()
    return 1 if missed else 0


def resolve(n: int, reps: int) -> int:
    """Seconds and CPU to resolve n hosts through `ssh -G`, each rep in a fresh event loop (a
    launch's: nothing cached); fails unless every name got its own answer."""
    walls, cpus = [], []
    for rep in range(reps + 1):  # the first warms the page cache: not counted
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        targets = asyncio.run(resolve_all([f"bench-node{i}" for i in range(n)]))
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if sorted(t.host for t in targets) != sorted(f"bench-node{i}" for i in range(n)):
            print(f"resolve: {n} names did not get {n} answers")
            return 1
        if rep:
            walls.append(wall)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    print(f"ssh -G for {n} hosts at once, {reps} reps; {load()}")
    print(f"  median {median(walls):.2f} s wall, {median(cpus):.2f} s CPU of the ssh -G runs")
    print(f"  runs: {' '.join(f'{w:.2f}' for w in walls)}")
    return 0


async def resolve_all(names: list[str]) -> list[openssh.Target]:
    return await asyncio.gather(*(openssh.resolve(name) for name in names))


def dashboard() -> int:
    """Keypress latency of the dashboard on 256 hosts and 2,048 ranks (scripted fakes),
    against the same keys on 4 hosts and 32 ranks: the ratio is what the scale costs."""
    with workspace("scale-dashboard", False) as work:
        small = asyncio.run(dashboard_keys(work / "small", 4))
        big = asyncio.run(dashboard_keys(work / "big", 256))
    rows = [
        [k, f"{median(small[k]):.1f}", f"{median(v):.1f}", f"{max(v):.1f}", str(len(v))]
        for k, v in big.items()
    ]
    every = sorted(x for v in big.values() for x in v)
    base = [x for v in small.values() for x in v]
    print("\ndashboard, key -> handled and drawn (ms), Pilot at 120x40:")
    print(table(["keys", "4 hosts median", "256 hosts median", "max", "n"], rows))
    p99 = every[min(len(every) - 1, int(len(every) * 0.99))]
    print(
        f"256 hosts / 2,048 ranks: all {len(every)} keys median {median(every):.1f} ms, "
        f"p99 {p99:.1f} ms; 4 hosts / 32 ranks median {median(base):.1f} ms; "
        f"ratio {median(every) / median(base):.2f}; {load()}"
    )
    return 0


async def dashboard_keys(work: Path, n: int) -> dict[str, list[float]]:
    from apptools import H100, FakeClusters, fake_app, settle

    from ddptui.remote.events import Event, GpuStats, HostState, NodeStarted, RunStarted

    names = [f"n{k:03d}" for k in range(n)]

    def script(run_id: str) -> list[Event]:
        out: list[Event] = [RunStarted(run_id, "/runs/x", tuple(names), 8 * n, "torchrun")]
        for k, name in enumerate(names):
            out.append(NodeStarted(name, k, 1000 + k, name, tuple(range(8 * k, 8 * k + 8))))
            out.append(HostState(name, k, "running"))
        return out

    work.mkdir()
    (work / "inv.yaml").write_text(
        "defaults: {transport: local}\nhosts:\n"
        f"  - {{host: localhost, name: 'n[000-{n - 1:03d}]'}}"
        "\njob: {script: t.py, nproc_per_node: 8}\n"
    )
    clusters = FakeClusters([GpuStats(name, k, (H100,) * 8) for k, name in enumerate(names)])
    app, _ = fake_app(work / "inv.yaml", script, cluster=clusters)
    took: dict[str, list[float]] = {}

    async def keys(what: str, *pressed: str) -> None:
        for key in pressed:
            t0 = time.perf_counter()
            await pilot.press(key)
            await pilot.pause()
            took.setdefault(what, []).append((time.perf_counter() - t0) * 1000)

    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.hosts.focus()
        await keys("hosts: down, pagedown, end/home", *["down"] * 20, *["pagedown"] * 10,
                   "ctrl+end", "ctrl+home")  # fmt: skip
        await keys("hosts: / n12, escape", "slash", *"n12", "enter", "slash", "escape")
        await pilot.press("l")
        await settle(pilot)
        app.pane.views.focus()
        await keys("views: down, pagedown", *["down"] * 20, *["pagedown"] * 20)
        await keys("views: ] next view", *["right_square_bracket"] * 10)
        await keys("views: / r2047, enter", "slash", *"r2047", "enter", "enter")
    return took


def launch_line(inv: inventory.Inventory, c: TestCluster) -> str:
    """Node 0's planned command, `%n` (pdsh's rank of the host) as its NODE_RANK."""
    node = planned(inv, "pdsh", [h.addr for h in c.hosts]).nodes[0]
    node = dataclasses.replace(node, env={**node.env, "NODE_RANK": "%n"})
    return shell_line(node, HOST_IFNAME, str(REPO))


def measure(
    runs: dict[str, list[str]], args: argparse.Namespace, c: TestCluster, work: Path, n: int
) -> dict[str, list[Timed]] | None:
    """Each variant --warmup times untimed (fresh hosts' first runs read python and the
    host code from disk), then --reps times, in turns."""
    names = list(runs)
    times: dict[str, list[Timed]] = {name: [] for name in names}
    for rep in range(-args.warmup, args.reps):
        for name in names[rep % 2 :] + names[: rep % 2]:
            slug = f"{name.replace(' ', '-')}-{rep}"
            argv = [str(work / f"{slug}.tsv") if a == "TIMELINE" else a for a in runs[name]]
            if name == "ddptui launch":
                argv += ["--run-dir", str(work / f"run-{rep}")]
            res = timed(argv, work / f"{slug}.out", work / f"{slug}.err", env=c.pdsh_env())
            if not answered_by_all(name, res, n):
                print(f"bench: {name} failed (exit {res.code}):\n{tail(res.err)}\n{tail(res.out)}")
                return None
            if rep >= 0:
                times[name].append(res)
            print(
                f"  {round_name(rep)}: {name:<13} {res.wall:6.2f} s wall, {res.cpu:6.2f} s CPU, "
                f"machine {res.busy:6.2f} s"
            )
    return times


def answered_by_all(name: str, res: Timed, n: int) -> bool:
    """Each variant did all its work: every host answered, or every node said hello."""
    out = res.out.read_bytes()
    if name == "pdsh probe":
        return out.count(PROBE_MARK) == n
    if name == "ddptui check":
        return res.code == 0 and sum(line.startswith(b"node") for line in out.splitlines()) == n
    return res.code == 0 and out.count(HELLO) == n


def login_times(inv: inventory.Inventory, fanouts: Sequence[int]) -> dict[int, float]:
    """Seconds to log into every host at each fan-out (a loop each: fresh gates)."""
    out = {}
    for width in fanouts:
        fanout.FANOUT = width
        out[width] = asyncio.run(login_all(inv))
    return out


async def login_all(inv: inventory.Inventory) -> float:
    transports = [SSHTransport(h) for h in inv.hosts]
    t0 = time.monotonic()
    try:
        await asyncio.gather(*(fanout.connect(t) for t in transports))
        return time.monotonic() - t0
    finally:
        await asyncio.gather(*(t.close() for t in transports))


if __name__ == "__main__":
    sys.exit(main())
