"""The dashboard on a run handed to Slurm, scripted (the real one: test_slurm_dashboard_e2e.py):
its job said pending with Slurm's reason, its rows the Slurm node names once it runs, no key
that would reach a node over SSH."""

from __future__ import annotations

import json
from pathlib import Path

from apptools import RUN_ID, fake_app, screen_text, settle

from ddptui.remote.events import Event, JobState

PENDING = "job 12 pending (Resources): expected to start at 2026-01-01 14:03 (in 3 m 10 s)"


def script(run_id: str) -> list[Event]:
    return [
        JobState("12", "SUBMITTED", "submitted to Slurm as job 12 through hpc-login"),
        JobState("12", "PENDING", PENDING, "Resources"),
    ]


async def test_pending_then_its_nodes(tmp_path: Path) -> None:
    inv = tmp_path / "slurm.yaml"
    inv.write_text(
        json.dumps({"slurm": {"login": "hpc-login", "nodes": 2}, "job": {"script": "t.py"}})
    )
    app, runs = fake_app(inv, script)
    async with app.run_test(size=(140, 30)) as pilot:
        await settle(pilot)
        assert not app.check_action("check", ()) and not app.check_action("shell", ())
        await pilot.press("l")
        await settle(pilot)
        assert app.status.state == "pending" and app.status.alert == PENDING
        assert "pending (Resources)" in screen_text(app)
        nodes = ("gpu-017", "gpu-018")
        app.control.emit(RUN_ID, JobState("12", "RUNNING", "job 12 running", nodes=nodes))
        await settle(pilot)
        assert list(app.hosts.infos[k].name for k in sorted(app.hosts.infos)) == list(nodes)
        assert app.status.state == "connecting" and not app.status.alert
        await pilot.press("s")
        await settle(pilot)
        assert runs.runs[0].stops == 1
