"""`job.sync`: pushing a project to every host, against rsync over ssh doing the same by hand.

    .venv/bin/python scripts/bench_sync.py [--hosts 4] [--files 200] [--mb 20] [--reps 3]
                                           [--testhosts PREFIX:SUBNET]

Brings up ssh test hosts (default prefix ddptb, 10.213.9.0/24; $DDPTUI_TESTHOSTS or
--testhosts picks others). The source is FILES files of MB megabytes in all (random bytes: no
compression helps either side), spread over a few directories. Three cases, each timed for both:

- cold: every host's destination is empty;
- warm: nothing changed since the last push;
- one: one file changed.

ddptui: `ddptui.remote.sync.push` over connections already open (what a launch adds: it holds them
for the checks anyway). rsync: `rsync -a` to every host at once, one ssh login each, as a
person would before launching by hand (it compares size and mtime; ddptui compares sha256).
Prints median seconds per case and the ratio ddptui / rsync.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from bench_common import REPO, TestCluster, median, table, workspace

from ddptui.remote import inventory
from ddptui.remote.agents import sync
from ddptui.remote.agents.sshtransport import SSHTransport

CASES = ("cold", "warm", "one")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--files", type=int, default=200)
    p.add_argument("--mb", type=float, default=20.0)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--testhosts", default=os.environ.get("DDPTUI_TESTHOSTS", "ddptb:10.213.9"))
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    if shutil.which("rsync") is None:
        sys.exit("bench: rsync is not installed (apt-get install -y rsync)")
    prefix, subnet = args.testhosts.split(":")
    with workspace("sync", args.keep) as work:
        src = make_source(work / "src", args.files, int(args.mb * 1e6))
        print(f"source: {args.files} files, {args.mb:g} MB; {args.hosts} hosts")
        with TestCluster(args.hosts, root=work / "hosts", prefix=prefix, subnet=subnet) as c:
            return asyncio.run(bench(args, c, src))


def make_source(root: Path, files: int, size: int) -> Path:
    for i in range(files):
        path = root / f"pkg{i % 8}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size // files))
    return root


async def bench(args: argparse.Namespace, c: TestCluster, src: Path) -> int:
    dests = [str(h.home / "proj") for h in c.hosts]
    hosts = [
        {"host": h.addr, "name": h.name, "workdir": d} for h, d in zip(c.hosts, dests, strict=True)
    ]
    inv_path = src / "inv.yaml"
    doc = {"defaults": c.inventory_defaults(), "hosts": hosts, "job": {"script": "x", "sync": True}}
    inv_path.write_text(yaml.safe_dump(doc))
    inv = inventory.load(inv_path)
    transports = [SSHTransport(h) for h in inv.hosts]
    await asyncio.gather(*(t.connect() for t in transports))
    times: dict[tuple[str, str], list[float]] = {}
    try:
        for rep in range(args.reps):
            for tool in ("ddptui", "rsync") if rep % 2 == 0 else ("rsync", "ddptui"):
                for case in CASES:
                    if case == "cold":
                        for d in dests:
                            shutil.rmtree(d, ignore_errors=True)
                    if case == "one":
                        changed = src / "pkg0" / "mod0.py"
                        changed.write_bytes(os.urandom(changed.stat().st_size))
                    t0 = time.perf_counter()
                    if tool == "ddptui":
                        results = await sync.push(inv, transports, dests, lambda e: None)
                        assert not any(r.error for r in results), results
                    else:
                        rsync_all(c, src, dests)
                    times.setdefault((tool, case), []).append(time.perf_counter() - t0)
    finally:
        await asyncio.gather(*(t.close() for t in transports))
    rows = []
    for case in CASES:
        d, r = median(times[("ddptui", case)]), median(times[("rsync", case)])
        rows.append([case, f"{d:.3f}", f"{r:.3f}", f"{d / r:.2f}"])
    print(table(["case", "ddptui s", "rsync s", "ddptui/rsync"], rows))
    return 0


def rsync_all(c: TestCluster, src: Path, dests: list[str]) -> None:
    ssh = f"ssh -F {c.ssh_config}"
    procs = [
        subprocess.Popen(
            ["rsync", "-a", "-e", ssh, f"{src}/", f"{h.name}:{d}/"],
            stdout=subprocess.DEVNULL,
            cwd=REPO,
        )
        for h, d in zip(c.hosts, dests, strict=True)
    ]
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"rsync failed: exit {p.returncode}")


if __name__ == "__main__":
    sys.exit(main())
