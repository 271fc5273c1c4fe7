"""job.checkpoint on this machine (local transport): the real supervisors and hub, a job that saves
every 5 steps and resumes from DDPTUI_CHECKPOINT; its failed attempts' steps lost, a chain
whose checkpoint stops advancing stopped, and a user's stop that waits for a save, said to
whoever watches (a stop from another launcher too)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from runtools import run_job

from ddptui.remote import inventory
from ddptui.remote.events import (
    CheckpointSaved,
    Event,
    LogBatch,
    RunFinished,
    StepsLost,
    Stopping,
)
from ddptui.remote.run.runner import Run
from ddptui.remote.store import runs

# Both nodes step; node 0 says each step and saves every 5th (written aside, then renamed, as
# torch.save through a temporary name does); node 0 fails at step 12 on the attempts FAIL names.
# No torch: a stand-in for torch.distributed says the process joined its group as rank NODE_RANK,
# so its lines carry its rank (remote/host/linebuf.py), as a real job's do.
JOB = """
import os, sys, time, types
attempt, node = os.environ["DDPTUI_ATTEMPT"], os.environ["NODE_RANK"]
dist = sys.modules["torch.distributed"] = types.ModuleType("torch.distributed")
dist.is_available = dist.is_initialized = lambda: True
dist.get_rank = lambda: int(node)
ckpt = os.environ["DDPTUI_CHECKPOINT"]
start = int(ckpt.rsplit("_", 1)[1].split(".")[0]) if ckpt else 0
print(f"node {node} attempt {attempt} resumes from {ckpt or 'nothing'}", flush=True)
os.makedirs("ckpt", exist_ok=True)
for step in range(start + 1, 21):
    time.sleep(0.05)
    if node == "0":
        print(f"step {step} loss {1 / step:.3f}", flush=True)
        if step % 5 == 0:
            with open(f"ckpt/.step_{step}.pt", "w") as f:
                f.write("weights")
            os.rename(f"ckpt/.step_{step}.pt", f"ckpt/step_{step}.pt")
        if step == 12 and (sys.argv[1] == "all" or attempt == "0"):
            sys.exit(3)
"""


# Both nodes step until TERM; then node 0 takes SAVE_S to save where it stands (aside, then
# renamed) and ends, as a job that catches SIGTERM to save does; node 1 ends at once.
SAVE_S = 2
SAVES_ON_TERM = f"""
import os, signal, sys, time, types
node = os.environ["NODE_RANK"]
dist = sys.modules["torch.distributed"] = types.ModuleType("torch.distributed")
dist.is_available = dist.is_initialized = lambda: True
dist.get_rank = lambda: int(node)
told = []
signal.signal(signal.SIGTERM, lambda *_: told.append(1))
os.makedirs("ckpt", exist_ok=True)
step = 0
while not told:
    step += 1
    print(f"step {{step}}", flush=True)
    time.sleep(0.05)
if node == "0":
    print(f"TERM at step {{step}}: saving", flush=True)
    time.sleep({SAVE_S})
    with open(f"ckpt/.step_{{step}}.pt", "w") as f:
        f.write("weights")
    os.rename(f"ckpt/.step_{{step}}.pt", f"ckpt/step_{{step}}.pt")
    print(f"saved step {{step}}", flush=True)
"""


def write(tmp: Path, fail: str, **job: Any) -> inventory.Inventory:
    (tmp / "job.py").write_text(JOB)
    (tmp / "saves_on_term.py").write_text(SAVES_ON_TERM)
    doc = {
        "defaults": {"transport": "local", "workdir": str(tmp), "python": sys.executable},
        "hosts": [{"host": "localhost", "name": f"node{k}"} for k in range(2)],
        "job": {
            "script": "job.py", "args": [fail], "launcher": "env", "master_port": "auto",
            "stop_grace": 1, "link_timeout": 10, "restart_delay": 0.2, "restarts": 3,
            "checkpoint": "ckpt", "nccl": {"socket_ifname": None}, **job,
        },
    }  # fmt: skip
    (tmp / "inventory.yaml").write_text(yaml.safe_dump(doc))
    return inventory.load(tmp / "inventory.yaml")


async def run(
    inv: inventory.Inventory, tmp: Path
) -> tuple[RunFinished, list[Event], dict[str, Any]]:
    fin, events = await run_job(inv, tmp, None, timeout=90)
    return fin, events, json.loads((tmp / "run" / "summary.json").read_text())


async def test_a_restart_resumes_from_the_newest_checkpoint_and_says_the_steps_lost(
    tmp_path: Path,
) -> None:
    fin, events, summary = await run(write(tmp_path, "0"), tmp_path)
    assert [a.status for a in fin.attempts] == ["failed", "succeeded"]
    ten = str(tmp_path / "ckpt" / "step_10.pt")
    log = (tmp_path / "run" / "rank-0.log").read_text().splitlines()
    assert "node 0 attempt 0 resumes from nothing" in log
    assert f"node 0 attempt 1 resumes from {ten}" in log
    assert f"node 1 attempt 1 resumes from {ten}" in (tmp_path / "run" / "rank-1.log").read_text()
    [lost] = [e for e in events if isinstance(e, StepsLost)]
    assert (lost.attempt, lost.path, lost.step, lost.reached, lost.lost) == (0, ten, 10, 12, 2)
    assert (
        lost.text()
        == "attempt 1 lost 2 steps: it reached step 12, the newest checkpoint is step 10"
    )
    first = summary["attempts"][0]
    assert (first["steps_lost"], first["reached"], first["checkpoint_step"]) == (2, 12, 10)
    assert "steps_lost" not in summary["attempts"][1]  # it succeeded: nothing lost
    assert summary["checkpoint"]["step"] == 20
    saved = [e.step for e in events if isinstance(e, CheckpointSaved)]
    assert saved[-1] == 20 and 10 in saved


async def test_a_chain_whose_checkpoint_stops_advancing_stops_and_says_so(tmp_path: Path) -> None:
    """Every attempt fails at step 12, resumed from step 10: the second attempt saved nothing
    new, so a third would fail there again (it prints fewer lines than the first: the lines'
    rule alone would not know)."""
    fin, _, summary = await run(write(tmp_path, "all"), tmp_path)
    assert [a.status for a in fin.attempts] == ["failed", "failed"]
    why = "no progress: the newest checkpoint (step 10) did not advance over two attempts"
    assert fin.reason == why and summary["reason"] == why
    assert [a["steps_lost"] for a in summary["attempts"]] == [2, 2]


def said(events: list[Event], text: str) -> int | None:
    """Where in the events a rank's line `text` came, if it did."""
    for i, e in enumerate(events):
        if isinstance(e, LogBatch) and any(line == text for _, line in e.lines):
            return i
    return None


async def test_a_stop_gives_the_ranks_stop_grace_to_finish_their_save_and_says_so(
    tmp_path: Path,
) -> None:
    """The user stops at step 5: TERM, and the ranks have stop_grace (20 s) to end. Node 0's
    save of SAVE_S completes and lands in the directory, said before it lands; the run is
    stopped, its newest checkpoint the one saved on the way out."""
    inv = write(tmp_path, "0", script="saves_on_term.py", stop_grace=20, restarts=0)

    def stop_at_step_5(run: Run, events: list[Event]) -> None:
        if not run.stopping and said(events[-1:], "step 5") is not None:
            run.stop()

    fin, events = await run_job(inv, tmp_path, stop_at_step_5, timeout=90)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert fin.status == "stopped"
    [stop] = [(i, e) for i, e in enumerate(events) if isinstance(e, Stopping)]
    assert (stop[1].grace, stop[1].checkpoint) == (20, "ckpt")
    assert stop[1].text() == (
        "stopping every node: TERM sent; the ranks have 20 s (job.stop_grace) to finish saving "
        "to ckpt, then KILL"
    )
    log = (tmp_path / "run" / "rank-0.log").read_text().splitlines()
    [step] = [line.split()[-1] for line in log if line.startswith("saved step ")]
    path = str(tmp_path / "ckpt" / f"step_{step}.pt")
    assert (tmp_path / "ckpt" / f"step_{step}.pt").read_text() == "weights"
    landed = said(events, f"saved step {step}")
    assert landed is not None and stop[0] < landed  # said while the ranks save
    saved = [e for e in events if isinstance(e, CheckpointSaved)]
    assert saved and (saved[-1].path, saved[-1].step) == (path, int(step))
    assert summary["checkpoint"]["path"] == path


async def test_a_stop_from_another_launcher_says_the_grace_to_an_attached_one(
    tmp_path: Path,
) -> None:
    """A detached run, attached to by one launcher and stopped by another (`ddptui stop RUN`):
    the attached one, which stopped nothing, hears from the hosts that TERM went and says the
    ranks' grace (20 s to finish saving to ckpt) before node 0's save lands."""
    inv = write(tmp_path, "0", script="saves_on_term.py", stop_grace=20, restarts=0)
    run_dir = tmp_path / "run"
    detached = await asyncio.wait_for(Run(inv, [].append, run_dir=run_dir, checks=False,
                                          detach=True).execute(), 60)  # fmt: skip
    assert detached.status == "detached"
    seen: list[Event] = []
    step_5 = asyncio.Event()

    def watch(event: Event) -> None:
        seen.append(event)
        if said([event], "step 5") is not None:
            step_5.set()

    attach = asyncio.ensure_future(Run.rejoin(runs.read(run_dir), watch).execute())
    await asyncio.wait_for(step_5.wait(), 60)
    stopper: list[Event] = []
    stopped = await asyncio.wait_for(
        Run.rejoin(runs.read(run_dir), stopper.append, stop=True).execute(), 60
    )
    fin = await asyncio.wait_for(attach, 60)
    assert stopped.status == fin.status == "stopped"
    [mine] = [e for e in stopper if isinstance(e, Stopping)]  # the stopper's own, at once
    assert (mine.grace, mine.checkpoint, mine.left) == (20, "ckpt", None)
    [(i, heard)] = [(i, e) for i, e in enumerate(seen) if isinstance(e, Stopping)]
    assert (heard.grace, heard.checkpoint, heard.left) == (20, "ckpt", None)  # live: all of it
    log = (run_dir / "rank-0.log").read_text().splitlines()
    [step] = [line.split()[-1] for line in log if line.startswith("saved step ")]
    landed = said(seen, f"saved step {step}")
    assert landed is not None and i < landed  # said while the ranks save
