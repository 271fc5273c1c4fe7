"""The dashboard under a flood: 32 ranks printing 50,000 lines/s together for 60 s.

    .venv/bin/python scripts/bench_dashboard.py [--seconds 60] [--rate 50000] [--nodes 4]
                                                [--ranks-per-node 8] [--json FILE]

The lines take the app's real path from the pipes on. Each node is a local-transport node
whose supervisor is replaced by a stand-in process (this script with --produce) that prints
the supervisor's wire protocol (records of `[rank]:text` lines) at the given rate,
the way a supervisor relays torchrun's tagged output. The real `remote.run.Run` reads the
pipes, untags the lines, its Recorder writes rank-N.log, and `emit` posts each batch as an
EngineEvent into the running app: message loop, LogBuffer, the timer that draws the visible
view with `Log.write_lines`, compositing and terminal output (the app renders as if to a
terminal; only the final write is dropped). Not measured: torch, torchrun, the real
supervisor's reading of the job's pipes (scripts/bench_relay.py measures that relay).

Measured while the flood runs:
  keypress latency  a key event posted as a terminal's would be -> its action handler starts;
                    keys cycle through ] ] a e e f f (views, errors-only, follow: each redraws)
  loop lag          how late a 50 ms asyncio sleep wakes up (what every input waits behind)
  memory            VmRSS sampled every 0.5 s, and VmHWM (peak) at the end, /proc/self/status
  CPU               this process's CPU time per line, and how long it waited, runnable, for a
                    CPU (/proc schedstat): on a shared machine, the part other processes cost
  disk              lines in every rank-N.log against lines produced, per rank
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TICK = 0.02  # a supervisor relays what it read every few ms; 20 ms batches are its worst case
STDERR_EVERY = 1000  # one line in this many goes to stderr (warnings, say)


def produce(node: int, first: int, count: int, rate: float, seconds: float) -> None:
    """A stand-in supervisor (its own process, as on a real host): prints `rate` lines/s of
    ranks first..first+count-1 for `seconds`, in the supervisor's wire protocol (records in
    data frames, remote/host/wire.py), until done or told "stop" on stdin. Lines go
    round-robin over the ranks, so the bench knows the counts."""
    from remote.host import wire  # standard library only: still no heavy import here

    # On a real cluster the supervisors run on the hosts, not beside the app: on this one
    # machine they yield the CPU to it first, so the app is measured, not its stand-ins.
    os.nice(int(os.environ.get("BENCH_PRODUCER_NICE", "10")))
    stop = threading.Event()

    def watch_stdin() -> None:
        for line in sys.stdin.buffer:
            if line == b"stop\n":
                break
        stop.set()  # "stop", or the launcher went away

    threading.Thread(target=watch_stdin, daemon=True).start()
    out = sys.stdout.buffer
    out.write(wire.MARK + wire.control(t="hello", live=True, spool_end=0))
    at = 0

    def record(kind: bytes, payload: bytes) -> None:
        nonlocal at
        rec = wire.record(kind, int(time.time() * 1000), payload)
        out.write(wire.data_frame(at, rec))
        at += len(rec)

    def say(msg: dict[str, Any]) -> None:
        record(b"m", json.dumps(msg).encode())

    say({"t": "started", "pid": os.getpid(), "hostname": f"node{node}"})
    t0, sent, total = time.monotonic(), 0, int(rate * seconds)
    while sent < total and not stop.is_set():
        time.sleep(TICK)
        due = min(total, int((time.monotonic() - t0) * rate)) - sent
        lines: list[str] = []
        errors: list[str] = []
        for i in range(sent, sent + due):
            text = f"[{first + i % count}]:step {i // count} loss 0.{i % 9973:04d} lr 3e-4 ok\n"
            (errors if i % STDERR_EVERY == STDERR_EVERY - 1 else lines).append(text)
        record(b"1", "".join(lines).encode())
        if errors:
            record(b"2", "".join(errors).encode())
        out.flush()
        sent += due
    say({"t": "exit", "code": 0, "stopped": stop.is_set()})
    out.write(wire.control(t="eof", end=at))
    out.flush()


if __name__ == "__main__" and sys.argv[1:2] == ["--produce"]:  # before the heavy imports
    node, first, count, rate, seconds = sys.argv[2:7]
    produce(int(node), int(first), int(count), float(rate), float(seconds))
    sys.exit(0)

from textual import events  # noqa: E402

from remote import inventory  # noqa: E402
from remote.run import Emit, Run  # noqa: E402
from remote.transport import LocalTransport, Process  # noqa: E402
from tui.app import Dashboard, RunLike  # noqa: E402
from tui.logbuffer import LogBuffer  # noqa: E402
from tui.logview import RankLog  # noqa: E402

KEYS = (
    ("right_square_bracket", "]", "action_view_next"),
    ("right_square_bracket", "]", "action_view_next"),
    ("a", "a", "action_view_all"),
    ("e", "e", "action_errors"),
    ("e", "e", "action_errors"),
    ("f", "f", "action_follow"),
    ("f", "f", "action_follow"),
)


def expected_lines(first: int, count: int, total: int) -> dict[int, int]:
    """Lines per rank of one producer that printed `total` lines round-robin."""
    return {first + j: total // count + (j < total % count) for j in range(count)}


class FloodTransport(LocalTransport):
    """Starts the stand-in supervisor instead of the real one; the rest is the local path."""

    def __init__(self, host: inventory.Host, args: argparse.Namespace) -> None:
        super().__init__(host)
        self.args = args

    async def start(self, argv: list[str]) -> Process:
        a, k = self.args, self.host.node_rank
        per_node = a.ranks_per_node
        me = [sys.executable, str(Path(__file__).resolve()), "--produce"]
        spec = [k, k * per_node, per_node, a.rate / a.nodes, a.seconds]
        return await super().start([*me, *map(str, spec)])


class BenchApp(Dashboard):
    """The dashboard, rendering as it would to a terminal (run_test's driver drops the bytes)."""

    @property
    def is_headless(self) -> bool:
        return False


def rss_kib() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in KiB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


def cpu_wait_s() -> float:
    """Seconds this process's threads waited for a CPU while runnable (/proc schedstat).

    On a shared machine this is the share of a stall that other processes caused."""
    total = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] if values else 0.0


async def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    nodes, per_node = args.nodes, args.ranks_per_node
    inv_path = work / "inventory.yaml"
    inv_path.write_text(
        "defaults: {transport: local}\nhosts:\n"
        + "".join(f"  - {{host: localhost, name: node{k}}}\n" for k in range(nodes))
        + f"job: {{script: train.py, nproc_per_node: {per_node}, master_port: 29999}}\n"
    )

    def runs(inv: inventory.Inventory, emit: Emit, run_id: str) -> RunLike:
        transports = [FloodTransport(h, args) for h in inv.hosts]
        return Run(
            inv, emit, run_id=run_id, run_dir=work / run_id, transports=transports, checks=False
        )

    app = BenchApp(inv_path, run_factory=runs)
    latencies: list[float] = []
    pressed: dict[str, float] = {}
    for _, _, action in {k[2]: k for k in KEYS}.values():
        original = getattr(app, action)

        def timed(*a: Any, _original: Any = original, _action: str = action) -> Any:
            if _action in pressed:
                latencies.append(time.perf_counter() - pressed.pop(_action))
            return _original(*a)

        setattr(app, action, timed)
    drawn = [0]
    show = RankLog.show

    def counted(self: RankLog, lines: list[Any], **kw: Any) -> None:
        drawn[0] += len(lines)
        show(self, lines, **kw)

    RankLog.show = counted  # type: ignore[method-assign]
    arrivals: list[float] = []  # when the first and the latest batch reached the app
    add = LogBuffer.add

    def timed_add(self: LogBuffer, batch: Any) -> None:
        if not arrivals:
            arrivals.append(time.perf_counter())
        arrivals[1:] = [time.perf_counter()]
        add(self, batch)

    LogBuffer.add = timed_add  # type: ignore[method-assign]
    lags: list[float] = []
    rss: list[int] = []

    async with app.run_test(size=(args.width, args.height)) as pilot:
        await pilot.pause()
        t0 = time.perf_counter()
        cpu0, wait0 = time.process_time(), cpu_wait_s()
        await pilot.press("l")
        assert app.worker is not None
        worker = app.worker
        driver = app._driver
        assert driver is not None
        rng = random.Random(1)

        async def lag_probe() -> None:
            while not worker.is_finished:
                t = time.perf_counter()
                await asyncio.sleep(0.05)
                lags.append(time.perf_counter() - t - 0.05)

        async def memory_probe() -> None:
            while not worker.is_finished:
                rss.append(rss_kib()[0])
                await asyncio.sleep(0.5)

        probes = [asyncio.ensure_future(lag_probe()), asyncio.ensure_future(memory_probe())]
        i = 0
        while not worker.is_finished:
            key, char, action = KEYS[i % len(KEYS)]
            i += 1
            pressed[action] = time.perf_counter()
            driver.send_message(events.Key(key, char))
            deadline = time.perf_counter() + 5
            while action in pressed and time.perf_counter() < deadline:
                await asyncio.sleep(0.002)
            if action in pressed:  # never handled within 5 s: count it as 5 s
                latencies.append(time.perf_counter() - pressed.pop(action))
            await asyncio.sleep(rng.uniform(0.05, 0.15))
        fin = await worker.wait()
        elapsed = time.perf_counter() - t0
        cpu, waited = time.process_time() - cpu0, cpu_wait_s() - wait0
        await asyncio.gather(*probes)
        received = app.logs.received
    _, hwm = rss_kib()

    run_dir = work / str(app.run_id)
    on_disk = {
        int(p.stem.split("-")[1]): sum(1 for _ in p.open(encoding="utf-8"))
        for p in run_dir.glob("rank-*.log")
    }
    per_node, total_per_node = args.ranks_per_node, int(args.rate / nodes * args.seconds)
    expected: dict[int, int] = {}
    for k in range(nodes):
        expected.update(expected_lines(k * per_node, per_node, total_per_node))
    total = sum(expected.values())
    flood = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else 0.0
    lat_ms = [x * 1000 for x in latencies]
    lag_ms = [x * 1000 for x in lags]
    return {
        "ranks": nodes * per_node,
        "rate_target": args.rate,
        "seconds_target": args.seconds,
        "status": fin.status,
        "elapsed_s": round(elapsed, 1),
        "lines_produced": total,
        "flood_s": round(flood, 1),  # first line to last line, as the app received them
        "lines_per_s": round(total / flood) if flood else None,
        "lines_received_by_app": received,
        "app_cpu_s": round(cpu, 1),  # this process only: the producers are other processes
        "app_cpu_us_per_line": round(cpu / total * 1e6, 2) if total else None,
        "app_waited_for_cpu_s": round(waited, 1),  # runnable, but other processes had the CPUs
        "lines_drawn": drawn[0],
        "lines_on_disk": sum(on_disk.values()),
        "disk_matches_per_rank": on_disk == expected,
        "keypresses": len(lat_ms),
        "key_latency_ms": {
            "p50": round(pct(lat_ms, 50), 1),
            "p99": round(pct(lat_ms, 99), 1),
            "max": round(max(lat_ms, default=0), 1),
            "mean": round(statistics.fmean(lat_ms), 1) if lat_ms else None,
        },
        "loop_lag_ms": {"p50": round(pct(lag_ms, 50), 1), "p99": round(pct(lag_ms, 99), 1)},
        "rss_mb": {
            "start": round(rss[0] / 1024, 1) if rss else None,
            "max_sampled": round(max(rss, default=0) / 1024, 1),
            "peak_hwm": round(hwm / 1024, 1),
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--rate", type=float, default=50_000.0, help="lines/s, all ranks together")
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--ranks-per-node", type=int, default=8)
    p.add_argument("--width", type=int, default=120)
    p.add_argument("--height", type=int, default=40)
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ddptui-bench-") as tmp:
        result = asyncio.run(bench(args, Path(tmp)))
    result["load_avg_1m_after"] = round(float(Path("/proc/loadavg").read_text().split()[0]), 2)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    lat, rss = result["key_latency_ms"], result["rss_mb"]
    ok = (
        lat["p99"] <= 100
        and rss["peak_hwm"] < 300
        and result["disk_matches_per_rank"]
        and result["status"] == "succeeded"
    )
    print(
        f"{result['ranks']} ranks, {result['lines_produced']:,} lines in {result['elapsed_s']} s: "
        f"key p99 {lat['p99']} ms, peak RSS {rss['peak_hwm']} MB, "
        f"disk {'complete' if result['disk_matches_per_rank'] else 'INCOMPLETE'} "
        f"-> {'PASS' if ok else 'FAIL'}",
        file=sys.stderr,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
