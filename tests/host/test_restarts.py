"""job.restarts on this machine (local transport): the real supervisors and hub, attempt after
attempt of a small job with no torch; the test hosts' end-to-end tests add torchrun and cuts."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import nvidia_smi
import pytest
import yaml
from runtools import run_job

from ddptui.remote import inventory
from ddptui.remote.events import Alert, Event, LogBatch, RunFinished, RunRestarting
from ddptui.remote.host import procs
from ddptui.remote.run import statuses
from ddptui.remote.run.runner import Run
from ddptui.remote.store import runs
from ddptui.tui.headless.printer import Printer
from ddptui.tui.text import run_cells, run_row

# Node 1 fails on the attempts named in FAIL (DDPTUI_ATTEMPT), after a line; every rank says
# its attempt, then ends (or sleeps, with HOLD, so that a stop finds it running).
JOB = """
import os, sys, time
attempt, node = os.environ["DDPTUI_ATTEMPT"], os.environ["NODE_RANK"]
print(f"node {node} attempt {attempt}", flush=True)
if node == "1" and attempt in sys.argv[1].split(","):
    sys.exit(3)
time.sleep(float(sys.argv[2]))
"""


def write(tmp: Path, nodes: int, fail: str, hold: float, **job: Any) -> inventory.Inventory:
    (tmp / "job.py").write_text(JOB)
    doc = {
        "defaults": {"transport": "local", "workdir": str(tmp), "python": sys.executable},
        "hosts": [{"host": "localhost", "name": f"node{k}"} for k in range(nodes)],
        "job": {
            "script": "job.py", "args": [fail, str(hold)], "launcher": "env",
            "master_port": "auto", "stop_grace": 1, "link_timeout": 10, "restart_delay": 0.2,
            "nccl": {"socket_ifname": None}, **job,
        },
    }  # fmt: skip
    (tmp / "inventory.yaml").write_text(yaml.safe_dump(doc))
    return inventory.load(tmp / "inventory.yaml")


async def run(
    inv: inventory.Inventory, tmp: Path, on: Any = None
) -> tuple[RunFinished, list[Event]]:
    """on(run, event): each event as it comes."""
    until = (lambda run, events: on(run, events[-1])) if on is not None else None
    return await run_job(inv, tmp, until, timeout=90)


def said(events: list[Event]) -> list[str]:
    return [text for e in events if isinstance(e, LogBatch) for _, text in e.lines]


def no_job_left(run_id: str) -> bool:
    return not procs.tagged_pids({"DDPTUI_RUN_ID": run_id})


async def test_a_failed_attempt_is_followed_by_one_that_succeeds(tmp_path: Path) -> None:
    notified = tmp_path / "notified"
    notify = {"command": f'echo "$DDPTUI_EVENT $DDPTUI_STATUS" >> {notified}',
              "events": ["failed", "restarted", "succeeded"]}  # fmt: skip
    inv = write(tmp_path, 2, "0", 0.2, restarts=2, notify=notify)
    fin, events = await run(inv, tmp_path)
    assert (fin.status, fin.exit_code) == ("succeeded", 0)
    assert [(a.attempt, a.status) for a in fin.attempts] == [(0, "failed"), (1, "succeeded")]
    assert fin.attempts[0].failure is not None and fin.attempts[0].failure.host == "node1"
    (restart,) = [e for e in events if isinstance(e, RunRestarting)]
    assert (restart.attempt, restart.of, restart.after) == (1, 3, "node1 failed (exit 3)")
    log = (tmp_path / "run" / "node-1.log").read_text().splitlines()
    assert log == [
        "node 1 attempt 0",
        "ddptui: attempt 2 of 3 (after node1 failed (exit 3))",
        "node 1 attempt 1",
    ]
    assert notified.read_text().splitlines() == [
        "failed restarting", "restarted running", "succeeded succeeded",
    ]  # fmt: skip
    alerts = [(e.event, e.wanted) for e in events if isinstance(e, Alert)]
    assert alerts == [("failed", True), ("restarted", True), ("succeeded", True)]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [a["status"] for a in summary["attempts"]] == ["failed", "succeeded"]
    assert no_job_left(str(json.loads((tmp_path / "run" / "run.json").read_text())["run_id"]))


async def test_no_restarts_left_ends_the_run_failed(tmp_path: Path) -> None:
    inv = write(tmp_path, 2, "0,1", 0.2, restarts=1)
    fin, events = await run(inv, tmp_path)
    assert (fin.status, fin.exit_code) == ("failed", 1)
    assert [a.status for a in fin.attempts] == ["failed", "failed"]
    assert fin.failure is not None and fin.failure.host == "node1"
    assert [e.event for e in events if isinstance(e, Alert)] == ["failed", "restarted", "failed"]


async def test_a_stop_in_the_restart_delay_restarts_nothing(tmp_path: Path) -> None:
    def stop_when_restarting(run: Run, event: Event) -> None:
        if isinstance(event, RunRestarting):
            run.stop()

    inv = write(tmp_path, 2, "0", 0.2, restarts=3, restart_delay=5)
    fin, events = await run(inv, tmp_path, stop_when_restarting)
    assert [a.attempt for a in fin.attempts] == [0]
    assert (fin.status, fin.exit_code) == ("failed", 1)  # its last attempt's
    assert "node 0 attempt 1" not in said(events)
    alerts = [(e.event, e.status) for e in events if isinstance(e, Alert)]
    assert alerts == [("failed", "restarting"), ("stopped", "failed")]


async def test_a_stop_while_running_is_never_followed_by_a_restart(tmp_path: Path) -> None:
    def stop_once_running(run: Run, event: Event) -> None:
        if isinstance(event, LogBatch) and "node 1 attempt 0" in said([event]):
            run.stop()

    inv = write(tmp_path, 2, "", 60, restarts=3)
    fin, events = await run(inv, tmp_path, stop_once_running)
    assert (fin.status, fin.exit_code) == ("stopped", 130)
    assert [a.attempt for a in fin.attempts] == [0]
    assert not [e for e in events if isinstance(e, RunRestarting)]


@pytest.mark.parametrize("nodes", [1, 3])
async def test_every_process_knows_its_attempt(tmp_path: Path, nodes: int) -> None:
    inv = write(tmp_path, nodes, "0", 0.1, restarts=1)
    _, events = await run(inv, tmp_path)
    lines = said(events)
    assert "node 0 attempt 0" in lines or nodes > 1  # (node 1's failure may stop it first)
    for k in range(nodes):
        assert (f"node {k} attempt 1" in lines) == (nodes > 1)


async def test_a_hang_the_launcher_sees_is_word_from_node_0(tmp_path: Path) -> None:
    notified = tmp_path / "notified"
    notify = {"command": f'echo "$DDPTUI_EVENT: $DDPTUI_MESSAGE" >> {notified}'}
    inv = write(tmp_path, 1, "", 4, hang_after=1, notify=notify)
    _, events = await run(inv, tmp_path)
    (alert,) = [e for e in events if isinstance(e, Alert) and e.event == "hang"]
    assert alert.wanted and "no rank printed a line for" in alert.message
    assert notified.read_text().startswith("hang: no rank printed a line for")


async def test_restart_on_ends_the_run_for_an_exit_it_does_not_name(tmp_path: Path) -> None:
    """Node 1 exits 3; job.restart_on names only 5 and hangs: no restart, said why."""
    inv = write(tmp_path, 2, "0", 0.2, restarts=2, restart_on=[5, "hang"])
    fin, events = await run(inv, tmp_path)
    assert (fin.status, [a.status for a in fin.attempts]) == ("failed", ["failed"])
    [alert] = [e for e in events if isinstance(e, Alert)]
    assert alert.message == "node1 failed (exit 3); job.restart_on does not name exit 3"
    assert fin.reason == "job.restart_on does not name exit 3"
    assert not [e for e in events if isinstance(e, RunRestarting)]


async def test_an_attempt_that_gets_no_further_stops_the_chain(tmp_path: Path) -> None:
    """Node 1 fails the same way after the same line every attempt: the second such failure
    ends the run, two restarts left unused, and the reason reaches the console, summary.json,
    `runs` and job.notify's command."""
    notified = tmp_path / "notified"
    notify = {"command": f'echo "$DDPTUI_EVENT: $DDPTUI_MESSAGE" >> {notified}'}
    inv = write(tmp_path, 2, "0,1,2,3", 0.2, restarts=3, notify=notify)
    fin, events = await run(inv, tmp_path)
    assert [a.status for a in fin.attempts] == ["failed", "failed"]
    last = [e for e in events if isinstance(e, Alert)][-1]
    why = "no progress: it failed as the last attempt did, no further"
    assert last.message == f"node1 failed (exit 3); {why}"  # job.notify's word
    assert notified.read_text().splitlines()[-1] == f"failed: node1 failed (exit 3); {why}"
    assert fin.reason == why  # the dashboard's end
    console = io.StringIO()
    Printer(io.StringIO(), console)(fin)
    assert f"ddptui: not restarted: {why}" in console.getvalue().splitlines()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["reason"] == why
    record = runs.read(tmp_path / "run")  # `runs`: its row's why
    await statuses.fill([record])
    assert run_cells(run_row(record))[-1] == why


SICK = """
import shutil, sys, time
time.sleep(2)  # the watch has read how the host began (well under 2 s); its next read is at 4 s
shutil.copy(sys.argv[1], sys.argv[2])  # GPU 3's uncorrectable ECC count rises...
sys.exit(1)  # ...and takes the rank down before the watch reads again
"""


async def test_a_gpu_that_took_its_rank_down_is_the_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rank died of its GPU before the watch's next read: the node's end reads once more,
    and names the GPU, not the rank."""
    machine = tmp_path / "h100"
    shutil.copytree(nvidia_smi.DATA / nvidia_smi.H100_BUSY, machine)
    nvidia_smi.install(tmp_path / "bin", str(machine))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    (tmp_path / "sick.py").write_text(SICK)
    write(tmp_path, 1, "", 0)
    doc = yaml.safe_load((tmp_path / "inventory.yaml").read_text())
    ecc = nvidia_smi.DATA / "health" / "ecc" / "health.csv"
    doc["job"].update(script="sick.py", args=[str(ecc), str(machine / "health.csv")], restarts=1)
    (tmp_path / "inventory.yaml").write_text(yaml.safe_dump(doc))
    fin, _ = await run(inventory.load(tmp_path / "inventory.yaml"), tmp_path)
    assert fin.failure is not None
    assert fin.failure.message == "GPU 3 (00000000:5D:00.0) on node0: 2 uncorrectable ECC errors"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [a["status"] for a in summary["attempts"]] == ["failed"]  # node 0 bad: no restart
