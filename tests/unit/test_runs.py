"""A run's status from its hosts' states (remote/store/runs.py's judge): what `runs` shows of a run
that wrote no summary (detached, or its launcher died)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ddptui.remote import inventory
from ddptui.remote.store import runs
from ddptui.remote.store.record import private_dir
from ddptui.remote.store.runs import judge
from ddptui.tui import text

HUB_LOST = "lost the run's hub (node 0's supervisor): not heard from for 60 s"
PEER_LOST = "node 1 (node1) lost: its supervisor was not heard from for 60 s"


def node(status: str, reason: str = "", **more: Any) -> dict[str, Any]:
    return {"status": status, "reason": reason, "alive": False, **more}


def test_the_hubs_word_is_the_runs_status() -> None:
    """Detached, node1 cut: every job was stopped (by the hub, or for losing it), but the hub
    ended the run failed. Before, `runs` said stopped until an attach said failed."""
    states = {
        0: node("stopped", PEER_LOST, run_status="failed", run_reason="node1 was lost"),
        1: node("stopped", HUB_LOST),
        2: node("stopped", PEER_LOST),
    }
    assert judge(states) == ("failed", "node1 was lost")


def test_without_the_hubs_word_the_worst_node_counts() -> None:
    states = {0: {"error": "cannot reach node0"}, 1: node("stopped", HUB_LOST), 2: None}
    assert judge(states) == ("stopped", HUB_LOST)
    assert judge({0: node("succeeded"), 1: node("failed", "rank 3 failed on node1")}) == (
        "failed",
        "rank 3 failed on node1",
    )


def test_a_detached_run_waiting_for_a_spare_says_which_host_is_bad() -> None:
    why = "GPU 3 (00000000:5D:00.0) on node1: 2 uncorrectable ECC errors"
    hub = node("waiting", alive=True, waiting=["node1", "node2"],
               bad_hosts={"1": ["node1", why]})  # fmt: skip
    assert judge({0: hub}) == (
        "running", "node1 bad, node2 lost: waiting for `ddptui attach` to put a spare in its place",
    )  # fmt: skip


def test_a_run_still_going_is_running_whatever_the_hub_said_before() -> None:
    states = {0: node("stopped", run_status="failed"), 1: node("running", alive=True)}
    assert judge(states) == ("running", "")


def test_bad_hosts_are_listed_and_a_later_launch_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose hub marked node1 bad: `runs` names it, and the next launch on these hosts
    warns; a run on other hosts does not."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    why = "GPU 3 (00000000:5D:00.0) on node1: 2 uncorrectable ECC errors"
    inv = inventory.parse(
        "hosts: [{host: node0}, {host: node1}, {host: node2, spare: true}]\n"
        "job: {script: t.py}\n", tmp_path / "inv.yaml",
    )  # fmt: skip
    old = private_dir(tmp_path / "old")
    runs.register(old, "20260101-000000-aaaa", inv)
    runs.write_info(old, bad_hosts={"node1": why})
    record = runs.read(old)
    assert runs.bad_hosts(record) == {"node1": why}
    row = text.run_row(record)
    assert row["bad_hosts"] == [{"host": "node1", "why": why}]
    assert text.run_cells(row)[2] == "2: node0… (bad: node1)"
    assert runs.bad_before(inv, "20260102-000000-bbbb") == [
        f"node1 was marked bad in the last run on these hosts (20260101-000000-aaaa): {why}"
    ]
    assert runs.bad_before(inv, "20260101-000000-aaaa") == []  # the run itself
    record.info.pop("bad_hosts")  # a detached run: node 0's state says it
    record.states = {0: {"bad_hosts": {"1": ["node1", why]}}}
    assert runs.bad_hosts(record) == {"node1": why}
