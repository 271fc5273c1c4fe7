"""The deep check's all-reduce bandwidth against a plain torch.distributed script by hand.

    .venv/bin/python scripts/bench_fabric.py [--trials 10] [--seconds 30]
                                             [--testhosts PREFIX:SUBNET] [--keep]

Brings up 4 ssh test hosts (default prefix ddptb, 10.213.9.0/24; $DDPTUI_TESTHOSTS or
--testhosts picks others) and starts, by hand with torchrun (static rendezvous, gloo over eth0,
one process per host), in turn:
- the deep check's worker (remote/host/fabric.py), whose largest all-reduce size S is taken;
- scripts/plain_allreduce.py at S with as many iterations (when it goes first, at the worker's
  previous S; a pair whose worker stopped below that size, under load, is shown, not counted).
Both report busbw as nccl-tests defines it. The bench prints each trial's pair, alternating
which goes first, and the geometric mean of the trials' ratios worker / plain with its 95 %
interval; it fails unless that mean is within 10 % of 1. (On a shared 2-core machine other
work moves single runs by up to 2x, either way: the ratio of a pair run back to back, averaged
over many pairs, is what cancels it; the interval says how far it did.) Each run must
also have put on the wire the load it claims: every host's sent bytes (its veth's counter)
against the all-reduce's 2(n-1)/n x S per operation (and the worker's link test bytes), within
0-25 % over (headers, the store, the acknowledgements).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from bench_common import REPO, TestCluster, load, table, workspace
from fabrictools import WORKER, NodeRun, sent_bytes, torchrun

from ddptui.remote.checks import fabric
from ddptui.remote.host.fabric import MARK, bus_factor, rate_text, size_text

HOSTS = (0, 1, 2, 3)
PLAIN = REPO / "scripts" / "plain_allreduce.py"
SAME = 0.10  # worker / plain: within 10 %
LOAD = (1.0, 1.25)  # sent / claimed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--seconds", type=float, default=30.0, help="the worker's budget")
    p.add_argument("--testhosts", default=os.environ.get("DDPTUI_TESTHOSTS", "ddptb:10.213.9"))
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    prefix, subnet = args.testhosts.split(":")
    with workspace("fabric", args.keep) as work:
        root = work / "hosts"
        with TestCluster(len(HOSTS), root=root, prefix=prefix, subnet=subnet) as c:
            return bench(args, c, work)


class Runner:
    """Runs on the hosts, each on a fresh port, in its own output directory."""

    def __init__(self, cluster: TestCluster, work: Path) -> None:
        self.cluster, self.work, self.count = cluster, work, 0

    def run(self, script: list[str]) -> tuple[list[NodeRun], list[int]]:
        """Every node's run, and the bytes each host sent meanwhile."""
        self.count += 1
        out = self.work / f"run{self.count}"
        out.mkdir()
        before = [sent_bytes(self.cluster, i) for i in HOSTS]
        runs = torchrun(self.cluster, HOSTS, script, out, port=29800 + self.count)
        sent = [sent_bytes(self.cluster, i) - b for i, b in zip(HOSTS, before, strict=True)]
        bad = [r for r in runs if r.code != 0]
        if bad:
            sys.exit(f"bench: {script[0]} failed (exit {bad[0].code}):\n{bad[0].err()[-3000:]}")
        return runs, sent


def bench(args: argparse.Namespace, c: TestCluster, work: Path) -> int:
    runner = Runner(c, work)
    loads: dict[str, list[float]] = {"worker": [], "plain": []}  # sent / claimed, per host
    largest: list[fabric.Size] = []  # the worker's headline, run after run

    def worker() -> dict[int, fabric.Size]:
        runs, sent = runner.run([str(WORKER), "--seconds", str(args.seconds)])
        line = next(ln for ln in runs[0].out().splitlines() if ln.startswith(MARK))
        report = fabric.parse(line)
        if report.headline is None:
            sys.exit("bench: the worker measured no all-reduce")
        largest.append(report.headline)
        loads["worker"] += carried(sent, worker_claims(line))
        return {s.nbytes: s for s in report.allreduce}

    def plain(size: fabric.Size) -> float:
        script = [str(PLAIN), "--bytes", str(size.nbytes), "--iters", str(size.iters)]
        runs, sent = runner.run(script)
        said = json.loads(runs[0].out().strip().splitlines()[-1])
        per_host = (size.iters + 1) * size.nbytes * bus_factor(len(HOSTS))
        loads["plain"] += carried(sent, [per_host] * len(HOSTS))
        return float(said["busbw"])

    rows, ratios = [], []
    for trial in range(args.trials):
        if trial % 2 == 0:  # the worker first; the plain script at its largest size
            sizes = worker()
            size = largest[-1]
            theirs = plain(size)
        else:  # the plain script first, at the worker's last largest size
            size = largest[-1]
            theirs = plain(size)
            sizes = worker()
        ours = sizes.get(size.nbytes)  # under load the worker may stop a size lower
        pair = ours.busbw / theirs if ours else None
        if pair:
            ratios.append(pair)
        shown = rate_text(ours.busbw) if ours else "-"
        said = f"{pair:.3f}" if pair else "not reached"
        row = [str(trial + 1), size_text(size.nbytes), str(size.iters), shown, rate_text(theirs)]
        rows.append([*row, said])
    print(table(["trial", "size", "iters", "worker busbw", "plain busbw", "worker/plain"], rows))
    logs = [math.log(r) for r in ratios]
    spread = 2 * statistics.stdev(logs) / len(logs) ** 0.5 if len(logs) > 1 else math.inf
    ratio = math.exp(statistics.mean(logs)) if logs else math.nan
    low, high = ratio / math.exp(spread), ratio * math.exp(spread)
    print(
        f"worker/plain over {len(ratios)} pairs: geometric mean {ratio:.3f} "
        f"(95 % interval {low:.3f} .. {high:.3f}); {load()}"
    )
    for who, sent in loads.items():
        print(f"load {who}: bytes sent / claimed, every host and run: {_span(sent)}")
    failed = not abs(ratio - 1) <= SAME
    failed |= any(not LOAD[0] <= r <= LOAD[1] for sent in loads.values() for r in sent)
    print("FAIL" if failed else f"ok: the same bandwidth within {SAME:.0%}, the load as claimed")
    return int(failed)


def worker_claims(line: str) -> list[float]:
    """Bytes each host's rank says it sent: the all-reduces (warm-ups included, 2(n-1)/n x
    size each) and its link transfers (the growing ones included)."""
    doc: dict[str, Any] = json.loads(line[len(MARK) :])
    each = sum(
        (s["iters"] + s["warmup"]) * s["bytes"] * bus_factor(doc["world"]) for s in doc["allreduce"]
    )
    return [each + sum(ln["sent"] for ln in doc["links"] if ln["src"] == k) for k in HOSTS]


def _span(values: list[float]) -> str:
    return f"{min(values):.3f} .. {max(values):.3f}"


def carried(sent: list[int], claimed: list[float]) -> list[float]:
    """Each host's bytes sent over those its rank claims."""
    return [s / c for s, c in zip(sent, claimed, strict=True)]


if __name__ == "__main__":
    sys.exit(main())
