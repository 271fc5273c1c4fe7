"""A run's status from its hosts' states (remote/store/runs.py's judge): what `runs` shows of a run
that wrote no summary (detached, or its launcher died)."""

from __future__ import annotations

from typing import Any

from ddptui.remote.store.runs import judge

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


def test_a_run_still_going_is_running_whatever_the_hub_said_before() -> None:
    states = {0: node("stopped", run_status="failed"), 1: node("running", alive=True)}
    assert judge(states) == ("running", "")
