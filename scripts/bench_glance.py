"""The cluster at a glance and into a hang: what opening the dashboard and a stacks dump cost.

    .venv/bin/python scripts/bench_glance.py [--hosts 32] [--reps 3] [--ranks-per-host 8]
                                             [--prefix P --subnet S] [--skip open,stacks,scale]

open    Every test host carries the recorded 8x H100 nvidia-smi stand-in. `ddptui --headless
        check` (the whole process) against opening the dashboard (the whole process too: the
        real app, headless, on the real engine) until every host's row shows its GPUs.
        Target: the dashboard's table is full in at most the time `check` takes (ratio <= 1).
stacks  A stall on 3 hosts x 2 ranks (tests/data/stall.py under real torchrun, gloo): one
        `stacks` dump over open connections, with and without the flight recorder, and the
        whole `ddptui --headless stacks RUN` command. Target: under 5 s.
scale   What a dump costs with many ranks: `--ranks-per-host` tagged Python processes per host
        on every test host (the hosts share this machine's CPUs and /proc, so all py-spy runs
        compete for 2 cores here; on a cluster each host dumps its own ranks in parallel).

Test hosts: bench_common's prefix and subnet unless --prefix/--subnet say otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench_common import (
    PREFIX,
    REPO,
    SUBNET,
    TestCluster,
    ddptui_command,
    median,
    table,
    tail,
    timed,
    workspace,
    write_inventory,
)
from nvidia_smi import H100_BUSY, stand_in

from ddptui.remote import inventory
from ddptui.remote.run.runner import fleet_for
from ddptui.remote.stalls import stacks
from ddptui.remote.stalls.stacks import Emit

STALL = REPO / "tests" / "data" / "stall.py"
FAKE_RANKS = REPO / "tests" / "data" / "fake_ranks.py"
FULL = "BENCH-TABLE-FULL"


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--open-app"]:
        return open_app(Path(sys.argv[2]))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=32)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--ranks-per-host", type=int, default=8)
    p.add_argument("--prefix", default=PREFIX)
    p.add_argument("--subnet", default=SUBNET)
    p.add_argument("--skip", default="", help="comma-separated parts to skip")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    with workspace("glance", args.keep) as work:
        root = work / "hosts"
        with TestCluster(args.hosts, root=root, prefix=args.prefix, subnet=args.subnet) as c:
            for i in range(args.hosts):
                c.put_tool(i, "nvidia-smi", stand_in(H100_BUSY))
            if "open" not in skip:
                bench_open(args, c, work)
            if "stacks" not in skip:
                bench_stacks(args, c, work)
            if "scale" not in skip:
                bench_scale(args, c, work)
    return 0


# -- open ---------------------------------------------------------------------------------------


def bench_open(args: argparse.Namespace, c: TestCluster, work: Path) -> None:
    inv = work / "inventory.yaml"
    hosts = [{"host": h.addr, "name": h.name} for h in c.hosts]
    write_inventory(
        inv,
        hosts,
        {**c.inventory_defaults(), "workdir": str(REPO)},
        {"script": "examples/train.py", "nproc_per_node": "auto"},
    )
    variants = {
        "ddptui check": [*ddptui_command(), "--headless", "check", "-i", str(inv)],
        "dashboard open": [sys.executable, __file__, "--open-app", str(inv)],
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for rep in range(args.reps):
        order = list(variants)[rep % 2 :] + list(variants)[: rep % 2]
        for name in order:
            slug = name.replace(" ", "-")
            marker = FULL.encode() if name.startswith("dashboard") else None
            res = timed(
                variants[name],
                work / f"{slug}-{rep}.out",
                work / f"{slug}-{rep}.err",
                marker=marker,
            )
            took = res.first_at if marker else res.wall
            if took is None or (name == "ddptui check" and res.code not in (0, 1)):
                sys.exit(f"bench: {name} failed (exit {res.code}):\n{tail(res.err)}")
            times[name].append(took)
            print(f"  rep {rep + 1}: {name:<15} {took:6.2f} s")
    ours, check = median(times["dashboard open"]), median(times["ddptui check"])
    print(
        table(
            ["", "median (s)", "runs"],
            [[n, f"{median(t):.2f}", " ".join(f"{x:.2f}" for x in t)] for n, t in times.items()],
        )
    )
    print(
        f"\nopen: every one of {args.hosts} hosts' GPUs in the table after {ours:.2f} s; "
        f"check takes {check:.2f} s: ratio {ours / check:.2f} (target <= 1)\n"
    )


def open_app(inv: Path) -> int:
    """The child: the real dashboard, headless, until every host's row has its GPUs."""
    sys.path.insert(0, str(REPO))
    from ddptui.tui.dashboard.app import create_app

    app = create_app(inv, runs_dir=inv.parent / "runs")

    async def run() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            while not app.hosts.infos or not all(i.gpus for i in app.hosts.infos.values()):
                await pilot.pause(0.01)
            print(FULL, flush=True)
            app.exit()

    asyncio.run(run())
    return 0


# -- stacks -------------------------------------------------------------------------------------


def bench_stacks(args: argparse.Namespace, c: TestCluster, work: Path) -> None:
    rows = []
    for flight in (False, True):
        job = {
            "script": str(STALL),
            "nproc_per_node": 2,
            "master_port": 29671,
            "stop_grace": 2,
            "hang_after": None,
            "nccl": {"flight_recorder": flight},
        }
        inv_path = work / f"stall-{flight}.yaml"
        c.write_inventory(inv_path, job, hosts=(0, 1, 2))
        run_dir = work / f"stall-run-{flight}"
        log = work / f"stall-{flight}.log"
        with log.open("w") as out:
            launch = subprocess.Popen(
                [
                    *ddptui_command(),
                    "--headless",
                    "launch",
                    "-i",
                    str(inv_path),
                    "--run-dir",
                    str(run_dir),
                ],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                deadline = time.monotonic() + 180
                while log.read_text().count("all_reduce done") < 6:
                    if time.monotonic() > deadline or launch.poll() is not None:
                        sys.exit(f"bench: the stall job did not start:\n{tail(log)}")
                    time.sleep(0.2)
                inv = inventory.load(inv_path)
                run_id = json.loads((run_dir / "events.jsonl").open().readline())["run_id"]
                dumps = asyncio.run(dump_times(inv, run_id, args.reps, flight))
                cli = []
                for rep in range(args.reps):
                    res = timed(
                        [
                            *ddptui_command(),
                            "--headless",
                            "stacks",
                            str(run_dir),
                            "-i",
                            str(inv_path),
                        ],
                        work / f"cli-{rep}.out",
                        work / f"cli-{rep}.err",
                    )
                    if res.code != 0:
                        sys.exit(f"bench: stacks failed:\n{tail(res.err)}\n{tail(res.out)}")
                    cli.append(res.wall)
                what = "then the flight recorder's traces" if flight else "py-spy only"
                rows.append([f"dump, {what}", f"{median(dumps):.2f}", _runs(dumps)])
                rows.append([f"ddptui stacks, {what}", f"{median(cli):.2f}", _runs(cli)])
            finally:
                launch.send_signal(signal.SIGINT)
                launch.wait(timeout=60)
    print(table(["6 ranks on 3 hosts", "median (s)", "runs"], rows))
    print("target: under 5 s\n")


async def dump_times(inv: inventory.Inventory, run_id: str, reps: int, flight: bool) -> list[float]:
    """One dump over agents already up (what `d` and a hang capture cost)."""
    fleet = fleet_for(inv)
    await asyncio.gather(*(fleet.agent(k, lambda e: None) for k in range(len(inv.hosts))))
    say: Emit = lambda event: None  # noqa: E731
    try:
        took = []
        for _ in range(reps):
            t0 = time.monotonic()
            collected = await stacks.traces(fleet, say, run_id) if flight else None
            report = await stacks.dump(fleet, say, run_id)
            took.append(time.monotonic() - t0)
            if collected is not None and sorted(collected.traces) != list(range(6)):
                sys.exit(f"bench: traces missing: {collected.missing}")
            if report.problems or [g.ranks for g in report.groups] != [(3,), (0, 1, 2, 4, 5)]:
                sys.exit(f"bench: unexpected dump:\n{report.text()}")
        return took
    finally:
        await fleet.close()


# -- scale --------------------------------------------------------------------------------------


def bench_scale(args: argparse.Namespace, c: TestCluster, work: Path) -> None:
    """A run of fake ranks (tests/data/fake_ranks.py, no torch) on every host; dumps of 1 host,
    then of all."""
    per = args.ranks_per_host
    inv_path = work / "scale.yaml"
    job = {"script": str(FAKE_RANKS), "args": [str(per)], "launcher": "env",
           "nproc_per_node": per, "master_port": 29671}  # fmt: skip
    c.write_inventory(inv_path, job, hosts=range(args.hosts))
    inv = inventory.load(inv_path)
    argv = [*ddptui_command(), "--headless", "launch", "-i", str(inv_path), "--detach"]
    res = subprocess.run([*argv, "--run-dir", str(work / "scale-run")], capture_output=True,
                         text=True, cwd=REPO, timeout=300)  # fmt: skip
    if res.returncode != 0:
        sys.exit(f"bench: the fake ranks did not start:\n{res.stderr}")
    run_id = res.stdout.split()[-1]
    try:
        time.sleep(2)  # every rank has started (the launch said so) and settled
        one, every = asyncio.run(scale_times(inv, run_id, args.reps, per))
    finally:
        subprocess.run([*ddptui_command(), "--headless", "stop", run_id], cwd=REPO, timeout=120)
    n = args.hosts * per
    print(
        table(
            [f"{per} ranks a host", "median (s)", "runs"],
            [
                [f"1 host, {per} ranks", f"{median(one):.2f}", _runs(one)],
                [f"{args.hosts} hosts, {n} ranks", f"{median(every):.2f}", _runs(every)],
            ],
        )
    )
    print(
        f"one op per host, all its ranks' py-spy side by side; at 128 hosts x 8 ranks "
        f"(1,024) each host's share is the 1-host figure ({median(one):.2f} s) on its own "
        f"CPUs, plus the fan-out of 128 ops (`check` measures that)\n"
    )


async def scale_times(
    inv: inventory.Inventory, run_id: str, reps: int, per: int
) -> tuple[list[float], ...]:
    fleet, first = fleet_for(inv), fleet_for(_first(inv))
    await asyncio.gather(*(fleet.agent(k, lambda e: None) for k in range(len(inv.hosts))))
    await first.agent(0, lambda e: None)
    say: Emit = lambda event: None  # noqa: E731
    try:
        one, every = [], []
        for _ in range(reps):
            t0 = time.monotonic()
            report = await stacks.dump(first, say, run_id)
            one.append(time.monotonic() - t0)
            assert sum(len(g.ranks) for g in report.groups) == per, report.text()
            t0 = time.monotonic()
            report = await stacks.dump(fleet, say, run_id)
            every.append(time.monotonic() - t0)
            found = sum(len(g.ranks) for g in report.groups if g.error is None)
            assert found == per * len(inv.hosts), report.text()
        return one, every
    finally:
        await asyncio.gather(fleet.close(), first.close())


def _first(inv: inventory.Inventory) -> inventory.Inventory:
    """The inventory of its first host alone."""
    return dataclasses.replace(inv, hosts=inv.hosts[:1])


def _runs(values: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in values)


if __name__ == "__main__":
    sys.exit(main())
