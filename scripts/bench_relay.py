"""Log relay: one rank prints 1,000,000 lines; every one must reach the console and rank-0.log.

    .venv/bin/python scripts/bench_relay.py [--lines 1000000] [--reps 3] [--transport local ssh]

The rank is scripts/print_lines.py (it writes numbered lines in chunks, so the relay is what is
measured, not the printing). Each transport runs three variants, alternating:

  printer   the printer alone, its stdout read through a pipe (how fast lines can be produced)
  torchrun  the very torchrun command ddptui plans, with `--tee 3` (its ranks on the console),
            run directly (local) or through `ssh node0 '...'` (ssh): the baseline a user would
            otherwise have
  ddptui    `ddptui --headless launch`: the host's agent and supervisor (which reads the rank's
            own files, torchrun's `--redirects 3`), the relay, console printer, rank-0.log

"lines/s" is N over the time between the first and the last chunk of lines read from the
command's stdout (the relay's steady rate); "wall" is the whole command, startup included.
ddptui's runs are checked: the console carries every `[r0 node0] line i` in order, and rank-0.log
is byte for byte what the printer wrote. The ssh transport uses one test host (prefix ddptb).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from bench_common import (
    HOST_IFNAME,
    REPO,
    Timed,
    cluster,
    ddptui_command,
    load,
    median,
    on_console,
    planned,
    replace_arg,
    shell_line,
    table,
    tail,
    timed,
    workspace,
    write_inventory,
)

from ddptui.remote import inventory
from ddptui.remote.agents.transport import Process, Result, Transport
from ddptui.remote.host import wire
from ddptui.remote.inventory import Host
from ddptui.remote.run.runner import Run
from ddptui.tui.headless.printer import Printer

PRINTER = "scripts/print_lines.py"
MARKER = b"line "
PORT = 29790
TARGET = 1.15  # issue "One host agent": the wall time, ddptui over ssh against torchrun over ssh


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=1_000_000)
    p.add_argument("--reps", type=int, default=3, help="runs of each variant (default 3)")
    p.add_argument("--transport", nargs="*", choices=["local", "ssh"], default=["local", "ssh"])
    p.add_argument("--keep", action="store_true", help="keep logs and outputs")
    p.add_argument(
        "--engine",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="first measure the engine alone, fed by a fake supervisor (default: on)",
    )
    p.add_argument(
        "--progress",
        choices=["on", "off", "both"],
        default="on",
        help="read the lines for training progress (job.progress), or not, or both alternating"
        " (the cost of parsing; the engine alone also measures lines that all say a step)",
    )
    args = p.parse_args(argv)
    os.chdir(REPO)  # the printer and torchrun take the script's path from here
    rows: list[list[str]] = []
    failed = False
    with workspace("relay", args.keep) as work:
        if args.engine:
            engine_only(args, work / "engine")
        for transport in args.transport:
            failed |= not bench(args, transport, work / transport, rows)
    header = ["transport", "variant", "wall s", "lines/s", "CPU s", "wall / torchrun"]
    print(f"\n{args.lines} lines from one rank, median of {args.reps} runs")
    print(table(header, rows))
    for transport in args.transport:
        got = {row[1]: float(row[2]) for row in rows if row[0] == transport}
        if "ddptui-off" in got:
            cost = 100 * (got["ddptui"] - got["ddptui-off"]) / got["ddptui-off"]
            print(f"{transport}: parsing progress costs {cost:+.1f} % wall (target <= 5 %)")
    over_ssh = [row for row in rows if row[:2] == ["ssh", "ddptui"]]
    if over_ssh:
        ratio = float(over_ssh[0][-1])
        met = "met" if ratio <= TARGET else "NOT met"
        print(f"ddptui over ssh / torchrun over plain ssh: {ratio:.2f} (target <= {TARGET}: {met})")
    print(
        "lines/s: lines over the time from the first to the last chunk of them read from the "
        "command's stdout\nCPU: the command and its children on this machine (over ssh: the "
        "launcher only; the host's side runs under sshd)"
    )
    print(load())
    return 1 if failed else 0


def bench(args: argparse.Namespace, transport: str, work: Path, rows: list[list[str]]) -> bool:
    work.mkdir(parents=True)
    job = {"script": PRINTER, "args": [str(args.lines)], "nproc_per_node": 1, "master_port": PORT}
    defaults: dict[str, Any] = {"workdir": str(REPO), "python": sys.executable}
    if transport == "local":
        defaults["transport"] = "local"
        inv = write_inventory(
            work / "inv.yaml", [{"host": "localhost", "name": "node0"}], defaults, job
        )
        return run_variants(args, transport, work, inv, local_torchrun(inv, work), rows)
    with cluster(1, work / "hosts") as c:
        defaults.update(c.inventory_defaults())
        host = c.hosts[0]
        inv = write_inventory(
            work / "inv.yaml", [{"host": host.addr, "name": "node0"}], defaults, job
        )
        node = planned(inv, "bench-relay", [host.addr]).nodes[0]
        node = replace_arg(node, "--log-dir", str(work / "torchrun-logs"))
        ssh = ["ssh", "-F", str(c.ssh_config), host.name, shell_line(node, HOST_IFNAME, str(REPO))]
        return run_variants(args, transport, work, inv, (ssh, None), rows)


def engine_only(args: argparse.Namespace, work: Path) -> None:
    """ddptui's side of the relay alone: Run fed supervisor messages by a fake transport.

    CPU seconds of this process (time.process_time), so other load on the machine hardly
    matters: the figure to compare engine versions by. Chunk sizes as seen from real
    supervisors: ~60 lines a message over ssh, ~1000 locally.
    """
    work.mkdir(parents=True)
    job = {"script": PRINTER, "args": [str(args.lines)], "nproc_per_node": 1}
    defaults = {"transport": "local", "workdir": str(REPO)}
    hosts = [{"host": "localhost", "name": "node0"}]
    invs = {
        on: write_inventory(work / f"inv-{on}.yaml", hosts, defaults, {**job, "progress": on})
        for on in (True, False)
    }
    print(f"engine alone, {args.lines} lines, CPU of the launcher process (median of {args.reps})")
    settings = {"on": [True], "off": [False], "both": [True, False]}[args.progress]
    forms = ["line", "step"] if args.progress != "off" else ["line"]
    for form, per_msg in [(f, n) for f in forms for n in (64, 1000)]:
        msgs = supervisor_messages(args.lines, per_msg, form)
        cpus: dict[bool, list[float]] = {setting: [] for setting in settings}
        for rep in range(args.reps):
            for setting in settings:  # alternating: the machine's load falls on both alike
                run_dir = work / f"run-{form}-{per_msg}-{rep}-{setting}"
                with open(os.devnull, "w") as null:
                    printer = Printer(null, null)
                    cpus[setting].append(relay_cpu(invs[setting], msgs, run_dir, printer))
                problem = compare(
                    (run_dir / "rank-0.log").read_bytes(), expected(args.lines, form), "log"
                )
                if problem:
                    sys.exit(f"bench: engine alone: {problem}")
                if setting:
                    check_parsed(run_dir, form, args.lines)
        for setting, got in cpus.items():
            cpu = median(got)
            what = f"{form} lines, {per_msg:4d}/message, progress {'on' if setting else 'off'}"
            print(f"  {what}: {cpu:5.2f} s CPU, {args.lines / cpu:>10,.0f} lines/s")
        if len(cpus) == 2:
            on, off = median(cpus[True]), median(cpus[False])
            cost = 100 * (on - off) / off
            print(f"  parsing costs {cost:+.1f} % CPU ({form} lines; target <= 5 %)")


def check_parsed(run_dir: Path, form: str, n: int) -> None:
    """With progress on, lines that say a step were all read: the last is in series.json."""
    if form != "step":
        return
    series = json.loads((run_dir / "series.json").read_text())
    if series["last"]["step"] != n - 1:
        sys.exit(f"bench: engine alone: the progress read ends at {series['last']}, not {n - 1}")


def supervisor_messages(n: int, per_msg: int, form: str = "line") -> list[bytes]:
    """What a node's supervisor sends for a torchrun rank printing n lines, one read each (see
    remote/host/daemon.py: records in the spool, spool bytes in D frames). form: `line i from
    rank 0`, or `step i/n loss x` (every line a step to parse)."""
    started = {"t": "started", "pid": 1, "hostname": "node0", "ifname": "lo"}
    records = [wire.meta(0, **started)]
    for start in range(0, n, per_msg):
        chunk = "".join(
            f"[0]:{text}\n" for text in lines_of(form, n, range(start, min(n, start + per_msg)))
        )
        records.append(wire.record(b"1", 0, chunk.encode()))
    records.append(wire.meta(0, t="exit", code=0, stopped=False))
    frames, offset = [wire.control(t="hello", spool_end=0)], 0
    for rec in records:
        frames.append(wire.data_frame(offset, rec))
        offset += len(rec)
    frames.append(wire.control(t="eof", end=offset))
    return frames


class FakeAgent:
    """A Process that is a host's agent replaying a recorded node stream: it answers HELLO,
    a CPU host's monitor, and streams the messages, one read each, on the `start` channel."""

    def __init__(self, msgs: list[bytes]) -> None:
        self.msgs = msgs
        self.out: asyncio.Queue[bytes] = asyncio.Queue()
        self.out.put_nowait(wire.MARK + wire.jframe(0, {"t": "hello", "pid": 1}))
        self.reader = wire.FrameReader(marked=True)

    def write(self, data: bytes) -> None:
        for f in self.reader.feed(data):
            if f.kind != b"j" or f.chan == 0:
                continue
            op = f.message().get("op")
            if op == "monitor":
                self.out.put_nowait(wire.jframe(f.chan, {"smi": None}) + wire.frame(f.chan, b"e"))
            elif op == "start":
                for msg in self.msgs:
                    self.out.put_nowait(wire.frame(f.chan, b"d", msg))
                self.out.put_nowait(wire.frame(f.chan, b"e"))

    async def read(self, n: int) -> bytes:
        return await self.out.get()

    async def readline(self) -> bytes:
        return await self.out.get()

    async def drain(self) -> None:
        pass

    def close_stdin(self) -> None:
        self.out.put_nowait(b"")

    async def wait(self) -> int | None:
        return 0

    def stderr_tail(self) -> str:
        return ""

    def kill(self) -> None:
        self.out.put_nowait(b"")


class ReplayTransport(Transport):
    def __init__(self, host: Host, msgs: list[bytes]) -> None:
        super().__init__(host)
        self.msgs = msgs

    async def connect(self) -> float:
        return 0.0

    async def start(self, argv: list[str]) -> Process:
        return FakeAgent(self.msgs)

    async def run(self, argv: list[str], input: bytes = b"", timeout: float = 30) -> Result:
        return Result(0, b"", b"")


def relay_cpu(
    inv: inventory.Inventory, msgs: list[bytes], run_dir: Path, printer: Printer
) -> float:
    transports = [ReplayTransport(inv.hosts[0], msgs)]
    run = Run(inv, printer, run_dir=run_dir, transports=transports, checks=False)
    t0 = time.process_time()
    fin = asyncio.run(run.execute())
    cpu = time.process_time() - t0
    if fin.exit_code != 0:
        sys.exit(f"bench: engine alone: the run ended {fin.status}")
    return cpu


def local_torchrun(inv: inventory.Inventory, work: Path) -> tuple[list[str], dict[str, str]]:
    node = on_console(planned(inv, "bench-relay", ["127.0.0.1"]).nodes[0])
    node = replace_arg(node, "--log-dir", str(work / "torchrun-logs"))
    ifname = "lo"  # what the supervisor finds for 127.0.0.1
    env = {**os.environ, **dict.fromkeys(("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"), ifname)}
    return list(node.argv), {**env, **node.env}


def run_variants(
    args: argparse.Namespace,
    transport: str,
    work: Path,
    inv: inventory.Inventory,
    torchrun: tuple[list[str], dict[str, str] | None],
    rows: list[list[str]],
) -> bool:
    ddptui = ddptui_command()
    off = work / "inv-progress-off.yaml"  # job.progress: false, no line read for progress
    doc = yaml.safe_load(inv.path.read_text())
    off.write_text(yaml.safe_dump({**doc, "job": {**doc["job"], "progress": False}}))
    invs = (
        {"on": [("ddptui", inv.path)], "off": [("ddptui", off)]}[args.progress]
        if (args.progress != "both")
        else [("ddptui", inv.path), ("ddptui-off", off)]
    )

    def launch(path: Path) -> Callable[[int], tuple[list[str], dict[str, str] | None]]:
        return lambda run: (
            [
                *ddptui,
                "--headless",
                "launch",
                "-i",
                str(path),
                "--run-dir",
                str(work / f"run-{run}"),
            ],
            None,
        )

    variants: dict[str, Callable[[int], tuple[list[str], dict[str, str] | None]]] = {
        "torchrun": lambda run: torchrun,
        **{name: launch(path) for name, path in invs},
    }
    if transport == "local":
        variants = {
            "printer": lambda run: ([sys.executable, PRINTER, str(args.lines)], None),
            **variants,
        }
    names = list(variants)
    results: dict[str, list[Timed]] = {name: [] for name in names}
    run = 0
    for rep in range(args.reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            run += 1
            argv, env = variants[name](run)
            res = timed(
                argv, work / f"out-{run}.txt", work / f"err-{run}.txt", env=env, marker=MARKER
            )
            problem = check(name, res, work / f"run-{run}", args.lines)
            rate = rate_of(res, args.lines)
            print(
                f"  {transport} rep {rep + 1} {name:<9} {res.wall:6.2f} s  {rate:>10,.0f} lines/s"
                f"  {problem or 'all lines arrived'}",
                flush=True,
            )
            if problem:
                print(f"bench: {transport} {name}: {problem}\n{tail(res.err)}")
                return False
            results[name].append(res)
    base = median([r.wall for r in results["torchrun"]])
    for name in names:
        walls = [r.wall for r in results[name]]
        rows.append(
            [
                transport,
                name,
                f"{median(walls):.2f}",
                f"{median([rate_of(r, args.lines) for r in results[name]]):,.0f}",
                f"{median([r.cpu for r in results[name]]):.2f}",
                f"{median(walls) / base:.2f}",
            ]
        )
    return True


def rate_of(res: Timed, n: int) -> float:
    if res.first_at is None or res.last_at is None or res.last_at <= res.first_at:
        return float("nan")
    return n / (res.last_at - res.first_at)


def check(name: str, res: Timed, run_dir: Path, n: int) -> str | None:
    """None when every line arrived; else what went wrong."""
    if res.code != 0:
        return f"exit {res.code}"
    out = res.out.read_bytes()
    if name == "printer":
        return compare(out, expected(n), "stdout")
    if name == "torchrun":
        return compare(tagged(out, b"[0]:"), expected(n), "stdout")
    return compare(tagged(out, b"[r0 node0] "), expected(n), "console") or compare(
        (run_dir / "rank-0.log").read_bytes(), expected(n), "rank-0.log"
    )


def lines_of(form: str, n: int, numbers: range) -> list[str]:
    if form == "step":
        return [f"step {i}/{n} loss {1 / (i + 1):.4f}" for i in numbers]
    return [f"line {i} from rank 0" for i in numbers]


def expected(n: int, form: str = "line") -> bytes:
    return "".join(f"{text}\n" for text in lines_of(form, n, range(n))).encode()


def tagged(out: bytes, prefix: bytes) -> bytes:
    """The lines carrying `prefix`, without it."""
    cut = len(prefix)
    return b"".join(line[cut:] + b"\n" for line in out.split(b"\n") if line.startswith(prefix))


def compare(got: bytes, want: bytes, where: str) -> str | None:
    if got == want:
        return None
    got_lines, want_lines = got.split(b"\n"), want.split(b"\n")
    for i, (g, w) in enumerate(zip(got_lines, want_lines, strict=False)):
        if g != w:
            return f"{where}: line {i} is {g[:60]!r}, expected {w[:60]!r}"
    return f"{where}: {len(got_lines) - 1} lines, expected {len(want_lines) - 1}"


if __name__ == "__main__":
    sys.exit(main())
