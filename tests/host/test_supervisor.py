"""The host side on this machine (local transport): the real supervisor, relay and engine.

Nothing slips through: escaped processes are swept, a dead supervisor's job is swept, exit codes
survive the reaper, the protocol survives whatever the host prints, output keeps its bytes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from runtools import run_job

from ddptui.remote import inventory
from ddptui.remote.events import Event, LogBatch, Notice
from ddptui.remote.host import procs
from ddptui.remote.host.netif import free_port
from ddptui.remote.run.runner import Run

REPO = Path(__file__).resolve().parents[2]


def local_inventory(tmp: Path, script: str, *args: str, **job: Any) -> inventory.Inventory:
    doc = {
        "defaults": {"transport": "local", "workdir": str(tmp), "python": sys.executable},
        "hosts": [{"host": "localhost", "name": "node0"}],
        "job": {
            "script": script,
            "args": list(args),
            "launcher": "env",
            "master_port": free_port(),
            "stop_grace": 1,
            **job,
        },
    }
    (tmp / "inventory.yaml").write_text(yaml.safe_dump(doc))
    return inventory.load(tmp / "inventory.yaml")


def pids_with_arg(marker: str) -> list[int]:
    found = []
    for pid in procs.all_pids():
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def lines(events: list[Event]) -> list[str]:
    return [text for e in events if isinstance(e, LogBatch) for _, text in e.lines]


ESCAPEES = """
import os, subprocess, sys, time
marker, how = sys.argv[1], sys.argv[2]
# A grandchild with a clean environment: no ddptui tags.
subprocess.Popen(["env", "-i", "sh", "-c", f"exec -a {marker}-envi sleep 300"])
# A double-forked daemon that drops its environment.
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve("/bin/sh", ["sh", "-c", f"exec -a {marker}-daemon sleep 300"], {})
    os._exit(0)
print("escaped", flush=True)
if how == "fail":
    sys.exit(3)
time.sleep(300 if how == "stop" else 0.5)
"""


@pytest.mark.parametrize("how", ["succeed", "fail", "stop"])
async def test_escaped_processes_are_swept(tmp_path: Path, how: str) -> None:
    (tmp_path / "escape.py").write_text(ESCAPEES)
    marker = f"ddptui-escapee-{uuid.uuid4().hex[:8]}"
    inv = local_inventory(tmp_path, "escape.py", marker, how)

    def stop_once_escaped(run: Run, events: list[Event]) -> None:
        if how == "stop" and "escaped" in lines(events[-1:]) and not run.stopping:
            run.stop()

    try:
        fin, events = await run_job(inv, tmp_path, stop_once_escaped)
        assert "escaped" in lines(events)
        want = {"succeed": "succeeded", "fail": "failed", "stop": "stopped"}[how]
        assert fin.status == want, fin
        assert not pids_with_arg(marker)  # the supervisor is a subreaper: its descendants go
    finally:
        for pid in pids_with_arg(marker):
            os.kill(pid, signal.SIGKILL)


async def test_a_stopped_node_reports_its_signal_not_zero(tmp_path: Path) -> None:
    (tmp_path / "sleep.py").write_text("import time; print('up', flush=True); time.sleep(60)\n")
    inv = local_inventory(tmp_path, "sleep.py")

    def stop_when_up(run: Run, events: list[Event]) -> None:
        if "up" in lines(events[-1:]):
            run.stop()

    fin, events = await run_job(inv, tmp_path, stop_when_up)
    exits = [e for e in events if type(e).__name__ == "NodeExited"]
    assert fin.status == "stopped"
    assert [e.exit_code for e in exits] == [-signal.SIGTERM]  # type: ignore[attr-defined]


async def test_a_killed_supervisor_is_reported_and_its_job_swept(tmp_path: Path) -> None:
    (tmp_path / "sleep.py").write_text("import time; print('up', flush=True); time.sleep(60)\n")
    inv = local_inventory(tmp_path, "sleep.py")
    killed: list[int] = []

    def kill_supervisor(run: Run, events: list[Event]) -> None:
        if "up" in lines(events[-1:]) and not killed:
            state = next(Path.home().glob(f".local/state/ddptui/runs/{run.run_id}/n0/state.json"))
            killed.append(json.loads(state.read_text())["pid"])
            os.kill(killed[0], signal.SIGKILL)

    fin, _ = await run_job(inv, tmp_path, kill_supervisor)
    assert fin.status == "failed"
    assert fin.failure is not None and "supervisor died" in fin.failure.message
    run_id = fin.failure.host and json.loads((tmp_path / "run" / "run.json").read_text())["run_id"]
    deadline = time.monotonic() + 10
    while procs.tagged_pids({"DDPTUI_RUN_ID": run_id}):
        assert time.monotonic() < deadline, "the job outlived its supervisor"
        await asyncio.sleep(0.1)


GREETER = """#!/bin/sh
echo "Welcome to the cluster! (conda base activated)"
printf 'a banner without a newline'
exec {python} "$@"
"""


async def test_a_python_that_greets_is_shown_not_fatal(tmp_path: Path) -> None:
    wrapper = tmp_path / "python"
    wrapper.write_text(GREETER.format(python=sys.executable))
    wrapper.chmod(0o755)
    (tmp_path / "hi.py").write_text("print('hello from the job')\n")
    inv = local_inventory(tmp_path, "hi.py")
    inv = inventory.parse(
        (tmp_path / "inventory.yaml").read_text().replace(sys.executable, str(wrapper)),
        tmp_path / "inventory.yaml",
    )
    fin, events = await run_job(inv, tmp_path)
    assert fin.status == "succeeded", fin
    shown = lines(events)  # the supervisor's python greets us, and the job's greets the job
    assert shown.count("Welcome to the cluster! (conda base activated)") == 2
    assert "a banner without a newline" in shown  # shown whole, before the protocol began
    assert shown[-1].endswith("hello from the job")


async def test_output_keeps_its_bytes_and_long_lines_are_cut(tmp_path: Path) -> None:
    job = (
        "import sys\n"
        "out = sys.stdout.buffer\n"
        "out.write(b'caf\\xe9 latin-1 \\xff\\xfe\\n')\n"
        "out.write(b'\\0' * 900_000 + b'\\n')\n"
        "out.write(b'after\\n')\n"
        "out.flush()\n"
    )
    (tmp_path / "bytes.py").write_text(job)
    inv = local_inventory(tmp_path, "bytes.py")
    fin, events = await run_job(inv, tmp_path)
    assert fin.status == "succeeded", fin
    log = (tmp_path / "run" / "node-0.log").read_bytes()
    assert b"caf\xe9 latin-1 \xff\xfe\n" in log  # byte for byte, no U+FFFD
    assert log.count(b"\0") == 900_000  # every byte kept, in bounded pieces
    assert log.endswith(b"after\n")
    assert max(len(line) for line in log.split(b"\n")) <= 1 << 18
    assert not [e for e in events if isinstance(e, Notice) and e.level == "error"]


def test_sweep_ends_even_when_a_process_will_not_die(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process in D state ignores KILL: the sweep gives up after a bound and names it."""
    proc = subprocess.Popen(["sleep", "60"])
    try:
        monkeypatch.setattr(procs, "KILL_WAIT_S", 0.3)
        monkeypatch.setattr(procs, "signal_all", lambda pids, sig: None)  # KILL "fails"
        t0 = time.monotonic()
        left = procs.sweep(lambda: [proc.pid], grace=0.2)
        assert time.monotonic() - t0 < 2
        assert left == [f"pid {proc.pid} (sleep) in S state"]
    finally:
        proc.kill()
        proc.wait()


def test_attach_after_a_killed_launcher_keeps_every_line_once(tmp_path: Path) -> None:
    """The launcher dies between checkpoints; an attach cuts the logs back to the last one and
    stores only what comes after: every line once, however many launchers it took."""
    from e2etools import Cli, Cmd, wait_for

    job = {"nproc_per_node": 2, "launcher": "torchrun", "link_timeout": 30}
    inv = local_inventory(tmp_path, str(REPO / "tests/data/tick.py"), "150", "0.02", **job)
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    cli = Cli(inv.path, tmp_path / "run", env=env)
    wait_for(lambda: "tick 1 40" in cli.stdout, 60, "ticks")
    cli.proc.kill()  # no goodbye: its last checkpoint is up to a second old
    attach = Cmd(["attach", str(tmp_path / "run")], tmp_path / "attach", env)
    assert attach.wait(60) == 0, attach.stderr
    for r in (0, 1):
        log = (tmp_path / "run" / f"rank-{r}.log").read_text().splitlines()
        assert log == [f"tick {r} {i}" for i in range(150)]
        shown = [x for x in attach.stdout.splitlines() if x.startswith(f"[r{r} node0] ")]
        assert len(shown) == 150  # the attach replays from the first line


def test_lines_trimmed_on_the_host_survive_in_the_run_dir(tmp_path: Path) -> None:
    """A host keeps spool_max_mb of output: what it trimmed is only in the local logs, and an
    attach after the launcher died must keep it there, not rewrite the logs from the host.

    The ranks wait, before their last lines, until the launcher has stored all they printed
    and is killed: what they print with no launcher (38 KB) must outlast a trim of the host's
    70 KB (two 32 KB segments stay), however late the attach comes. (Killed on a line seen
    on the console, the launcher had stored up to a second less, and a slow attach found those
    lines trimmed: said, as job.spool_max_mb says, but not what this test is about.)"""
    from e2etools import Cli, Cmd, wait_for

    script, go = tmp_path / "chatty.py", tmp_path / "go"
    script.write_text(
        "import os, sys, time\n"
        "r = os.environ['RANK']\n"
        "for i in range(3000):\n"
        f"    while i == {CHATTY_KILL} and not os.path.exists({str(go)!r}):\n"
        "        time.sleep(0.01)\n"
        "    print(f'chatty {r} {i:05d} ' + 'x' * 60)\n"
        "    time.sleep(0.002)\n"
    )
    job = {"nproc_per_node": 2, "launcher": "torchrun", "link_timeout": 30, "spool_max_mb": 0.07}
    inv = local_inventory(tmp_path, str(script), **job)
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    cli = Cli(inv.path, tmp_path / "run", env=env)

    def stored() -> int:  # the least of the rank logs' sizes the launcher has checkpointed
        try:
            nodes = json.loads((tmp_path / "run" / "offsets.json").read_text())
        except (OSError, ValueError):
            return 0
        files = nodes.get("0", {}).get("files", {})
        return min(files.get(f"rank-{r}.log", 0) for r in (0, 1))

    wait_for(lambda: stored() >= CHATTY_KILL * 76, 90, "the chatter stored")  # 76 B a line
    cli.proc.kill()
    go.touch()
    attach = Cmd(["attach", str(tmp_path / "run")], tmp_path / "attach", env)
    assert attach.wait(90) == 0, attach.stderr
    assert "lines already received are kept" in attach.stderr  # the host trimmed meanwhile
    assert "before ddptui could read them" not in attach.stderr
    for r in (0, 1):
        log = (tmp_path / "run" / f"rank-{r}.log").read_text().splitlines()
        assert log == [f"chatty {r} {i:05d} " + "x" * 60 for i in range(3000)]


CHATTY_KILL = 2750  # the line the chatter's ranks wait at: 250 lines (38 KB) are left


def test_the_end_waits_for_a_viewer_that_connected_as_the_run_ended(tmp_path: Path) -> None:
    """An attach that connects just before the socket's name goes is still served to its end,
    not cut off by the supervisor's exit (seen as 'its supervisor died' after a detached run)."""
    from ddptui.remote.host.viewers import Viewers

    d = Viewers(None, dict, print, 1.0)
    served = threading.Event()

    def client(sock: socket.socket, done: threading.Event) -> None:
        served.wait(10)  # the viewer's last bytes take their time
        sock.close()
        done.set()

    d._client = client  # type: ignore[method-assign]
    d.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    d.server.bind(str(tmp_path / "s"))
    d.server.listen(4)
    late = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    late.connect(str(tmp_path / "s"))  # in the backlog: not accepted, not a client yet
    threading.Thread(target=d._accept, args=(d.server,), daemon=True).start()
    threading.Timer(0.3, served.set).start()
    t0 = time.monotonic()
    d.drain(time.monotonic() + 10)
    assert served.is_set() and time.monotonic() - t0 >= 0.25
    late.close()
    d.closing = True  # the accept loop's thread ends, as the daemon's does
    d.server.close()
