"""Issue 39's two Slurm benchmarks on a real Slurm (tests/support/slurmhosts.py: a controller, its
login node, three compute nodes):

    scripts/bench_slurm.py [--reps 5] [--follow 300] [--slurmhosts PREFIX:SUBNET] [--keep]

1. Submit to first rank line: `ddptui launch` of a 2-node torchrun job (tests/data/tick.py, two
   ranks a node) against a plain `sbatch` of the same inventory's `ddptui export slurm` script
   through the same login node, timed from the command's start to the first rank's line (on
   ddptui's console; in the job's output file for sbatch), the two alternated, medians and their
   ratio (target <= 1.1x), and each one's submission (ddptui's `submitted` line; sbatch's return)
   apart, and how long Slurm held each job before it allocated its nodes (slurmctld's log: from
   its submission to its `Allocate`, 0 to ~2.5 s here whatever submitted it), with the medians
   less that. Each rep must run every rank's lines to COMPLETED, or the bench fails.
2. Logins to the login node of a followed run: one run followed for --follow seconds, the login
   node sshd's accepted logins counted (its log) at the run's start, after its first minute and at
   its end. Target: 1 login for the whole run, none while it is followed; logins per hour is that
   count, extrapolated from the window measured (no login after the first means none in an hour).
   The run must have streamed its lines for the whole window, or the bench fails. --follow 0
   leaves it out.

Root and the Slurm packages needed (see slurmhosts.py); the cluster is the bench's own (sl9 /
10.231.59 unless --slurmhosts says), apart from the tests'.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from bench_common import REPO, ddptui_command, workspace
from slurmhosts import SlurmCluster, tick_job

TICKS, EVERY = 20, 0.05  # each rep's job: 1 s of lines a rank
RANKS, NODES = 4, 2
TARGET = 1.1
SETTLE_S = 3.0  # from a job's end to the next submission, for both variants


# slurmctld's words as a job gets its nodes: its main pass's, or the backfill pass's
ALLOCATED = r"(?:sched: Allocate|sched/backfill: _start_job: Started)"


class Rep(NamedTuple):
    sent: float  # seconds from the command's start to the submission
    first: float  # ... to the first rank line
    job: str  # Slurm's job id


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument(
        "--follow", type=float, default=300.0, help="seconds the followed run runs (0: none)"
    )
    p.add_argument("--slurmhosts", default="sl9:10.231.59", help="PREFIX:SUBNET of the cluster")
    p.add_argument("--keep", action="store_true", help="keep the outputs")
    args = p.parse_args(argv)
    prefix, _, subnet = args.slurmhosts.partition(":")
    with (
        workspace("slurm", args.keep) as work,
        SlurmCluster(3, root=work / "slurm", prefix=prefix, subnet=subnet) as c,
    ):
        ok = submit_to_first_line(c, work, args.reps)
        ok = (args.follow <= 0 or logins_per_hour(c, work, args.follow)) and ok
    return 0 if ok else 1


# -- 1. submit to first rank line -----------------------------------------------------------


def submit_to_first_line(c: SlurmCluster, work: Path, reps: int) -> bool:
    inv = c.write_inventory(work / "inv.yaml", tick_job(TICKS, EVERY), nodes=NODES)
    exported = subprocess.run(
        [*ddptui_command(), "export", "slurm", "-i", str(inv)],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    (c.home / "exported.sh").write_text(exported)
    done: dict[str, list[Rep]] = {"ddptui": [], "sbatch": []}
    held: dict[str, list[float]] = {"ddptui": [], "sbatch": []}
    ended_at = 0.0
    for rep in range(reps):
        for name, one in (("ddptui", by_ddptui), ("sbatch", by_sbatch)):
            c.wait_idle()
            # Slurm starts a job submitted within ~2 s of the last one's end only at its next
            # pass (2.2-2.3 s after the submission here, 0.5 s otherwise): each variant is
            # submitted as long after the last job as the other, not as soon as it can be
            time.sleep(max(0.0, ended_at + SETTLE_S - time.monotonic()))
            found = one(c, work / f"{name}-{rep}", inv)
            ended_at = time.monotonic()
            if found is None:
                return False
            done[name].append(found)
            held[name].append(slurm_held(c, found.job))
            print(
                f"rep {rep}: {name} submitted after {found.sent:.2f} s, Slurm held job "
                f"{found.job} {held[name][-1]:.2f} s, first rank line after {found.first:.2f} s",
                flush=True,
            )
    med = {k: statistics.median(r.sent for r in v) for k, v in done.items()}
    print("submitted after (median): " + ", ".join(f"{k} {v:.2f} s" for k, v in med.items()))
    less = {
        k: statistics.median(r.first - h for r, h in zip(v, held[k], strict=True))
        for k, v in done.items()
    }
    print(
        f"less Slurm's hold, median of {reps}: ddptui {less['ddptui']:.2f} s, sbatch "
        f"{less['sbatch']:.2f} s: {less['ddptui'] / less['sbatch']:.3f}x"
    )
    # the job's own way, from its nodes' allocation to the first line: the nodes' part alone
    ran = {
        k: statistics.median(r.first - r.sent - h for r, h in zip(v, held[k], strict=True))
        for k, v in done.items()
    }
    print(
        f"allocation to first rank line (less submission and hold), median of {reps}: ddptui "
        f"{ran['ddptui']:.2f} s, sbatch {ran['sbatch']:.2f} s"
    )
    mine = statistics.median(r.first for r in done["ddptui"])
    base = statistics.median(r.first for r in done["sbatch"])
    ratio = mine / base
    print(
        f"submit to first rank line, median of {reps}: ddptui {mine:.2f} s, sbatch of the "
        f"exported script {base:.2f} s: {ratio:.3f}x (target <= {TARGET}x)"
    )
    return ratio <= TARGET


def slurm_held(c: SlurmCluster, job: str) -> float:
    """Seconds from the job's submission to its nodes' allocation, in slurmctld's log."""
    log = (c.root / "log" / "slurmctld.log").read_text(errors="replace")
    found = [
        re.search(rf"^\[(\S+)\] {what} JobId={job} ", log, re.M)
        for what in ("_slurm_rpc_submit_batch_job:", ALLOCATED)
    ]
    if not all(found):
        raise SystemExit(f"bench: job {job}'s submission or allocation is not in slurmctld's log")
    at = [datetime.fromisoformat(m[1]).timestamp() for m in found if m]
    return at[1] - at[0]


def by_ddptui(c: SlurmCluster, base: Path, inv: Path) -> Rep | None:
    """(submitted, first rank line) after the command's start: its `submitted` line's time
    (its own lines go to stderr, read with stdout as they come)."""
    run_dir = base.with_suffix(".run")
    argv = [*ddptui_command(), "--headless", "launch", "-i", str(inv), "--run-dir", str(run_dir)]
    t0 = time.monotonic()
    with subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        assert proc.stdout is not None
        first = sent = None
        job = ""
        lines = []
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            if first is None and line.startswith("[r"):
                first = time.monotonic() - t0
            if sent is None and (said := re.search(r"submitted to Slurm as job (\d+)", line)):
                sent, job = time.monotonic() - t0, said[1]
            lines.append(line)
        code = proc.wait()
    summary = json.loads((run_dir / "summary.json").read_text())
    ticks = sum(1 for line in lines if line.startswith("[r") and " tick " in line)
    done = summary["slurm"].get("state") == "COMPLETED" and ticks == RANKS * TICKS
    if code != 0 or not done or first is None or sent is None:
        said = "".join(line for line in lines if not line.startswith("["))
        print(f"bench: ddptui's run did not complete every rank's lines ({ticks}):\n{said}")
        return None
    return Rep(sent, first, job)


def by_sbatch(c: SlurmCluster, base: Path, inv: Path) -> Rep | None:
    """sbatch through the login node, as a user submits the exported script by hand; its first
    rank line as it lands in the job's output file (the cluster's home is this machine's)."""
    t0 = time.monotonic()
    reply = c.ssh(f"cd {c.home} && sbatch --parsable exported.sh")
    sent = time.monotonic() - t0
    job = reply.stdout.strip().split(";")[0]
    if reply.returncode != 0 or not job:
        print(f"bench: sbatch failed: {reply.stderr}")
        return None
    out = c.home / f"slurm-{job}.out"
    first = None
    while first is None and time.monotonic() - t0 < 300:
        if out.exists() and "tick " in out.read_text(errors="replace"):
            first = time.monotonic() - t0
        else:
            time.sleep(0.01)
    state = ended(c, job)
    ticks = out.read_text(errors="replace").count("tick ") if out.exists() else 0
    if first is None or state != "COMPLETED" or ticks != RANKS * TICKS:
        print(f"bench: the sbatch job {job} ended {state} with {ticks} lines")
        return None
    return Rep(sent, first, job)


def ended(c: SlurmCluster, job: str) -> str:
    while True:
        argv = ["squeue", "-h", "--states=all", "-j", job, "-o", "%T"]
        state = c.slurm(argv).stdout.strip()
        if state and state not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING"):
            return state
        time.sleep(0.2)


# -- 2. logins to the login node ------------------------------------------------------------


def logins_per_hour(c: SlurmCluster, work: Path, follow: float) -> bool:
    every = 0.5
    count = math.ceil(follow / every)
    inv = c.write_inventory(work / "follow.yaml", tick_job(count, every), nodes=NODES)
    c.wait_idle()
    before = c.logins()
    run_dir = work / "follow.run"
    argv = [*ddptui_command(), "--headless", "launch", "-i", str(inv), "--run-dir", str(run_dir)]
    out = work / "follow.out"
    t0 = time.monotonic()
    with out.open("w") as f:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
    while "[r" not in out.read_text(errors="replace") and proc.poll() is None:
        time.sleep(0.1)
    streaming = time.monotonic()
    time.sleep(60)
    after_minute = c.logins() - before
    code = proc.wait(follow + 600)
    total = c.logins() - before
    followed = time.monotonic() - streaming
    ticks = out.read_text(errors="replace").count(" tick ")
    later = total - after_minute
    print(
        f"logins to the login node: {total} in a followed run of {followed:.0f} s streamed "
        f"({time.monotonic() - t0:.0f} s in all, {ticks} rank lines); {after_minute} by its "
        f"first minute, {later} after: {later * 3600 / (followed - 60):.1f} more an hour "
        "(extrapolated from the window), so 1 login an hour of a followed run (target 1)"
        if later == 0
        else f"logins to the login node: {total} ({later} after the first minute)"
    )
    if code != 0 or ticks != RANKS * count or followed < follow * 0.9:
        print(f"bench: the followed run did not stream for {follow:.0f} s (exit {code})")
        return False
    return total == 1 and later == 0


if __name__ == "__main__":
    sys.exit(main())
