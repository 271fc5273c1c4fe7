"""What the run's own watch (hangs and stragglers) costs a job, and how soon it names a hang.

    .venv/bin/python scripts/bench_watch.py [--reps 5] [--hang-reps 3] [--seconds 20]
        [--budget-min 12] [--silent] [--flight-recorder]

(`--reps 0`: the hang runs alone, no throughput.)

Throughput: the same 4-host job (tests/data/straggler.py, balanced: one rank a host, each step a
few matrix products, `--device-ms` of waiting as for a GPU, and an all_reduce: the ranks mostly
wait, as on a GPU host, and leave the machine's 2 cores free), launched with the watch (the
default) and without it (`job.hang_after: null`) in pairs, back to back, which goes first
alternating (on-off, off-on), `--reps` pairs or as many as `--budget-min` allows. Each run's
rate is the job's own: the steps its ranks agree they made in their `--seconds` of stepping, by
their own clock (their `done after N steps` lines), nothing of the launch in it. The cost is 1 -
the geometric mean of each pair's watched / unwatched rate, with a 95 % t-interval over the
pairs: what drifts on a shared machine (other work, its caches, its clock) between pairs cancels
within each; `no figure` where the interval is not inside +-1 % (the target), met where its top
is at most 1 %. The load beside each run. The load is checked: every rank reports the same step
count, the job ran its seconds and succeeded, and its rate is the one its device time allows
(within a factor of 2). Detection: tests/data/hang_once.py detached on 2 hosts x 2 ranks (rank 3
asleep before an all_reduce on attempt 0), `--hang-reps` times; the seconds from the job's last
line to the hang named (node 0's hang-0.json), then from the hang confirmed to attempt 1's first
step (node 0's spool, the host's clock), and whether attempt 1 then succeeded. Test hosts of its
own (root needed); figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench_common import (
    REPO,
    cluster,
    ddptui_command,
    load,
    median,
    tail,
    timed,
    workspace,
)
from testhosts import TestCluster

from ddptui.remote.host import spool, vitals, wire
from ddptui.remote.host.looks import LOOK_S, Looks
from ddptui.remote.host.probe import find_py_spy
from ddptui.remote.host.watch import POLL_S

DATA = REPO / "tests" / "data"
DONE = re.compile(r"rank (\d+) done after (\d+) steps")
TARGET_COST = 0.01  # the watch may cost the job at most 1 % of its steps per second
TARGET_NAMED_S = 120.0
TARGET_RESTART_S = 30.0  # the restarted attempt running, after the hang named (+ restart_delay)
RESTART_DELAY_S = 0.5


def throughput(
    c: TestCluster, work: Path, rep: int, watch: bool, args: argparse.Namespace
) -> float:
    """Steps per second of one run; exits if the run did not do what it claims."""
    job = {
        "script": str(DATA / "straggler.py"), "nproc_per_node": 1, "master_port": "auto",
    }  # fmt: skip
    if not watch:
        job["hang_after"] = None
    name = f"{'watch' if watch else 'off'}-{rep}"
    seconds = args.seconds
    env = {"SECONDS_": str(seconds), "WORK": str(args.work), "DEVICE_MS": str(args.device_ms),
           "LINE_EVERY": "0" if args.silent else "20"}  # fmt: skip
    inv = c.write_inventory(work / f"{name}.yaml", job, hosts=[0, 1, 2, 3], env=env)
    with Spied() as spied:
        # the checks skipped: the same in both, and not what is measured
        argv = ["--headless", "launch", "-i", str(inv), "--run-dir", str(work / name),
                "--skip-checks"]  # fmt: skip
        run = timed([*ddptui_command(), *argv], work / f"{name}.out", work / f"{name}.err")
    if args.silent and watch and len(spied.pids) < 4:  # 4 ranks, read at least once
        sys.exit(f"bench: {name}: the watch read {len(spied.pids)} stacks of a silent job")
    done = {int(r): int(n) for r, n in DONE.findall(run.out.read_text())}
    if run.code != 0 or sorted(done) != [0, 1, 2, 3] or len(set(done.values())) != 1:
        sys.exit(f"bench: {name} did not run its 4 ranks to the end:\n{tail(run.err)}")
    if run.wall < seconds:
        sys.exit(f"bench: {name} took {run.wall:.1f} s, less than its {seconds:g} s of steps")
    rate = done[0] / seconds
    print(f"  {name}: {done[0]} steps in {seconds:g} s, {run.wall:.1f} s launch to end")
    if args.device_ms and not 0.5 * 1000 / args.device_ms <= rate <= 1000 / args.device_ms:
        sys.exit(f"bench: {name}: {rate:.1f} steps/s, not the load of {args.device_ms:g} ms "
                 "of device time a step (its CPU work starved, or no wait)")  # fmt: skip
    return rate


class Spied:
    """The py-spy processes seen while it is open (a look every 50 ms): the stacks the watch
    read, for a silent job whose load claims them."""

    def __init__(self) -> None:
        self.pids: set[int] = set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._look, daemon=True)

    def __enter__(self) -> Spied:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    def _look(self) -> None:
        while not self.done.wait(0.05):
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if argv[0].endswith(b"py-spy") and b"dump" in argv:
                    self.pids.add(int(pid))


# Student's t, 97.5th percentile, by degrees of freedom (a 95 % two-sided interval)
T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
        10: 2.23, 12: 2.18, 15: 2.13, 20: 2.09, 30: 2.04, 60: 2.00}  # fmt: skip


def paired_cost(pairs: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(cost, low, high): 1 - the geometric mean of watched / unwatched over the pairs, and its
    95 % interval (a t-interval of the pairs' log ratios; a df between the table's rows takes
    the row below, the wider)."""
    logs = [math.log(on / off) for on, off in pairs]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return 1 - math.exp(mean), -math.inf, math.inf
    t = T975[max(df for df in T975 if df <= len(logs) - 1)]
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    return 1 - math.exp(mean), 1 - math.exp(mean + half), 1 - math.exp(mean - half)


def spread(rates: list[float]) -> float:
    """(max - min) / median: how far one set's runs differ, the noise the cost sits in."""
    return (max(rates) - min(rates)) / median(rates) if rates else 0.0


def node_cpu(ranks: int = 8, rounds: int = 500, looks: int = 30) -> tuple[float, float]:
    """The CPU a node's supervisor spends on the watch, as a share of one core: a poll every
    POLL_S (each rank's tree's CPU and I/O), and a look a second at each rank's main thread
    (its state, and its stack by py-spy, whose own CPU counts), on `ranks` sleeping processes
    here: (the supervisor's, py-spy's). Robust where wall-clock throughput is not: it counts
    CPU seconds, the children's included."""
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time\nwhile 1: time.sleep(1)"])
                for _ in range(ranks)]  # fmt: skip
    spy = find_py_spy()
    if spy is None:
        sys.exit("bench: no py-spy here: the looks' cost cannot be measured")
    try:
        node = vitals.Node()
        node.by_pid = {p.pid: r for r, p in enumerate(sleepers)}
        t0 = time.process_time()
        for _ in range(rounds):
            node.sample(False)
        poll = (time.process_time() - t0) / rounds
        seen, t0, c0 = Looks(), time.process_time(), _children_cpu()
        for _ in range(looks):
            seen.look(node.by_pid, spy)
        look = (time.process_time() - t0) / looks
        spies = (_children_cpu() - c0) / looks
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
    if any(n < looks for _, n in seen.waits.values()):
        sys.exit(f"bench: py-spy read {seen.waits} of {looks} looks: not the load claimed")
    return poll / POLL_S + look / LOOK_S, spies / LOOK_S


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def detection(c: TestCluster, work: Path, rep: int, flight: bool) -> tuple[float, float]:
    """Seconds from the job's last line to the hang named, and from then to the restarted
    attempt running (its first step's line), detached, nobody attached. flight: with the
    flight recorder on (each rank serves its pipe): every trace kept and analysed first."""
    job = {
        "script": str(DATA / "hang_once.py"), "nproc_per_node": 2, "master_port": "auto",
        "restarts": 1, "restart_delay": RESTART_DELAY_S,
    }  # fmt: skip
    if flight:
        job["nccl"] = {"flight_recorder": True}
    inv = c.write_inventory(work / f"hang-{rep}.yaml", job, hosts=[0, 1])
    run = timed([*ddptui_command(), "--headless", "launch", "-i", str(inv), "--run-dir",
                 str(work / f"hang-{rep}"), "--detach"], work / f"hang-{rep}.out",
                work / f"hang-{rep}.err")  # fmt: skip
    run_id = run.out.read_text().split()[-1]
    node0 = c.hosts[0].home / f".local/state/ddptui/runs/{run_id}/n0"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        state = json.loads((node0 / "state.json").read_text())
        if state.get("run_status"):
            break
        time.sleep(1)
    kept = node0 / "hang-0.json"
    if not kept.exists() or state.get("run_status") != "succeeded":
        sys.exit(f"bench: hang {rep}: no hang named, or attempt 1 did not succeed ({state})")
    found = json.loads(kept.read_text())
    if found["culprits"] != [3]:
        sys.exit(f"bench: hang {rep}: named {found['culprits']}, not rank 3")
    kept = found.get("flight_recorder") or {}
    if flight and (kept.get("ranks") != [0, 1, 2, 3] or kept.get("missing_ranks") != [3]):
        sys.exit(f"bench: hang {rep}: the flight recorder's traces not kept, or no verdict: {kept}")
    silent = float(found["silent_s"])
    return silent, restarted_after(node0, rep) - silent


def restarted_after(node0: Path, rep: int) -> float:
    """From node 0's spool (host clock): its ranks' last line of attempt 0 to attempt 1's
    first step on node 0 (a rank's `step 0` line: its process group up, one all_reduce done).
    Less the silence the rule measured, it is the time from the hang confirmed to the restart,
    what happens at a hang included (the stacks, and the flight recorder's traces, kept)."""
    reader, last, named, running = wire.SpoolReader(), None, None, None
    for seg in sorted(node0.glob(spool.PREFIX + "*"), key=lambda p: int(p.name.split(".")[1])):
        for kind, ms, payload, _ in reader.feed(seg.read_bytes()):
            if kind == b"m" and named is None and json.loads(payload).get("event") == "hang":
                named = ms
            elif kind in (b"1", b"2") and named is None:
                last = ms
            elif kind == b"1" and named is not None and b" step 0:" in payload:
                running = ms
                break
        if running is not None:
            break
    if last is None or named is None or running is None:
        sys.exit(f"bench: hang {rep}: no line, no hang word, or no step of attempt 1 after it")
    return (running - last) / 1000


def measure(c: TestCluster, work: Path, args: argparse.Namespace) -> list[tuple[float, float]]:
    """(watched, unwatched) steps/s, pair after pair, back to back, which goes first
    alternating; no pair starts past --budget-min."""
    pairs: list[tuple[float, float]] = []
    t0, took = time.monotonic(), 0.0
    for rep in range(args.reps):
        if args.budget_min and time.monotonic() - t0 + took > args.budget_min * 60:
            print(f"the budget ({args.budget_min:g} min) spent: {rep} pairs")
            break
        began, rate = time.monotonic(), {}
        for watch in (rep % 2 == 0, rep % 2 != 0):
            rate[watch] = throughput(c, work, rep, watch, args)
            print(f"pair {rep + 1} {'watch' if watch else 'off  '}: {rate[watch]:.2f} steps/s "
                  f"({load()})", flush=True)  # fmt: skip
        pairs.append((rate[True], rate[False]))
        took = max(took, time.monotonic() - began)
    return pairs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--hang-reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0, help="of stepping, each run")
    ap.add_argument("--budget-min", type=float, default=None,
                    help="start no pair past this many minutes of pairs")  # fmt: skip
    # A step as on a GPU host: a little CPU work, then the device's time (the rank waits, its
    # CPU free). 4 CPU-bound ranks on a 2-core machine measure the scheduler, not the watch.
    ap.add_argument("--work", type=int, default=4, help="matrix products a step (CPU)")
    ap.add_argument("--device-ms", type=float, default=25.0, help="0: CPU-bound steps")
    # A job that prints nothing: past 30 s of silence the watch reads every rank's stack
    # (py-spy) every 15 s, the most it ever does.
    ap.add_argument("--silent", action="store_true", help="the job prints no line until done")
    ap.add_argument("--flight-recorder", action="store_true",
                    help="the hangs with nccl.flight_recorder: true")  # fmt: skip
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--testhosts", default="ddptw:10.213.19")
    args = ap.parse_args()
    with workspace("watch", args.keep) as work, cluster(4, work / "hosts",
                                                        testhosts=args.testhosts) as c:  # fmt: skip
        print(load())
        share, spies = node_cpu()
        print(f"a node's supervisor watching 8 ranks: {share:.3%} of a core, and its py-spy "
              f"looks {spies:.1%} of a core")  # fmt: skip
        pairs = measure(c, work, args)
        found = [detection(c, work, rep, args.flight_recorder) for rep in range(args.hang_reps)]
        print(load())
    cost_met = True
    if pairs:  # --reps 0: the hangs alone
        on, off = [p[0] for p in pairs], [p[1] for p in pairs]
        cost, low, high = paired_cost(pairs)
        print(f"steps/s, {len(pairs)} pairs: watch median {median(on):.2f}, off "
              f"{median(off):.2f}; cost {cost:+.2%}, 95 % interval {low:+.2%} to {high:+.2%} "
              f"(target <= {TARGET_COST:.0%}); spread of the runs: watch {spread(on):.1%}, "
              f"off {spread(off):.1%}; of the pairs' ratios "
              f"{spread([a / b for a, b in pairs]):.1%}")  # fmt: skip
        cost_met = high <= TARGET_COST
        if not -TARGET_COST <= low <= high <= TARGET_COST:  # not resolved at the target's scale
            print(f"no figure: the interval is not inside +-{TARGET_COST:.0%}; more pairs, or a "
                  "quieter machine")  # fmt: skip
    named, restarted = [f[0] for f in found], [f[1] for f in found]
    print(f"hang named after the last line: {', '.join(f'{s:.1f} s' for s in named)} "
          f"(target <= {TARGET_NAMED_S:g} s)")  # fmt: skip
    after = ", ".join(f"{s:.1f} s" for s in restarted)
    print(f"attempt 1 running after the hang confirmed: {after} "
          f"(target <= {TARGET_RESTART_S:g} s + restart_delay {RESTART_DELAY_S:g} s)")  # fmt: skip
    met = (max(named, default=0) <= TARGET_NAMED_S
           and max(restarted, default=0) <= TARGET_RESTART_S + RESTART_DELAY_S)  # fmt: skip
    return 0 if cost_met and met else 1


if __name__ == "__main__":
    sys.exit(main())
