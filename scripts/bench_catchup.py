"""Catch-up after a disconnection: 1M lines printed while the link was down, then the reconnect.

    .venv/bin/python scripts/bench_catchup.py [--lines 1000000] [--down 20] [--reps 1]

One ssh test host (prefix ddptb). The rank waits 3 s, prints --lines lines as fast as it can,
then idles. Meanwhile the host's link goes silent (its veth down: no FIN, no RST) for --down
seconds, so every one of those lines is spooled on the host while nobody reads. Measured: from
the launcher's "reconnected" to the last of those lines written to the console and rank-0.log
(the engine in this process, the headless printer writing to a file). Target: < 5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path

from bench_common import REPO, cluster, load, median, workspace, write_inventory
from testhosts import veth_name

from ddptui.remote.events import Event, LogBatch, Notice
from ddptui.remote.run.runner import Run
from ddptui.tui.headless.printer import Printer

JOB = """
import sys, time
n = int(sys.argv[1])
print("ready", flush=True)
time.sleep(3)
out = sys.stdout
for start in range(0, n, 10_000):
    out.write("".join(f"line {i}\\n" for i in range(start, min(n, start + 10_000))))
out.flush()
time.sleep(float(sys.argv[2]))
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=1_000_000)
    p.add_argument("--down", type=float, default=20.0, help="seconds the link stays down")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    took = []
    with workspace("catchup", args.keep) as work, cluster(1, work / "hosts") as c:
        (work / "job.py").write_text(JOB)
        job = {
            "script": str(work / "job.py"),
            "args": [str(args.lines), str(args.down + 15)],
            "launcher": "env",
            "link_timeout": args.down + 40,
            "master_port": 29791,
        }
        defaults = {**c.inventory_defaults(), "workdir": str(REPO)}
        hosts = [{"host": c.hosts[0].addr, "name": "node0"}]
        inv = write_inventory(work / "inv.yaml", hosts, defaults, job)
        for rep in range(args.reps):
            took.append(asyncio.run(once(inv, work / f"run-{rep}", c, args)))
            print(f"  rep {rep + 1}: last line {took[-1]:.2f} s after the reconnect", flush=True)
    print(
        f"\n{args.lines} lines during a {args.down:g} s outage: median {median(took):.2f} s "
        "from reconnect to the last line on console and in rank-0.log (target < 5 s)"
    )
    print(load())
    return 0


async def once(inv, run_dir: Path, c, args: argparse.Namespace) -> float:  # type: ignore[no-untyped-def]
    veth = veth_name(c.prefix, 0)
    marks: dict[str, float] = {}
    last = f"line {args.lines - 1}"
    console = open(run_dir.with_suffix(".out"), "w")  # noqa: SIM115

    def emit(event: Event) -> None:
        printer(event)
        if isinstance(event, Notice) and "reconnected" in event.text:
            marks["reconnected"] = time.monotonic()
        if isinstance(event, LogBatch) and any(text == last for _, text in event.lines[-1:]):
            marks["last"] = time.monotonic()
        if isinstance(event, LogBatch) and "ready" in (t for _, t in event.lines):
            marks.setdefault("ready", time.monotonic())

    printer = Printer(console, sys.stderr)
    run = Run(inv, emit, run_dir=run_dir, checks=False)
    task = asyncio.ensure_future(run.execute())
    while "ready" not in marks:
        await asyncio.sleep(0.1)
    subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    try:
        await asyncio.sleep(args.down)
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], check=True)
    fin = await task
    console.close()
    log = (run_dir / "node-0.log").read_text().splitlines()
    lines = [x for x in log if x.startswith("line ")]
    assert lines == [f"line {i}" for i in range(args.lines)], "lines lost or repeated"
    assert fin.exit_code == 0, fin
    return marks["last"] - marks["reconnected"]


if __name__ == "__main__":
    sys.exit(main())
