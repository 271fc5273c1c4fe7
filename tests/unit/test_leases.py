"""GPU leases, the pure parts: which GPUs a node may take and which it takes (remote/host/lease.py),
the queue's claims before it, what a host's words say (ops), and how they are worded (words)."""

from __future__ import annotations

import dataclasses

import pytest

from ddptui.remote.agents import ops
from ddptui.remote.events import GpuProcess, LeaseHolder
from ddptui.remote.host import gpuinfo, lease
from ddptui.remote.host.leasedir import LeaseError
from ddptui.remote.leases import words

H100 = "NVIDIA H100 80GB HBM3"
GPUS = [gpuinfo.Gpu(i, f"GPU-{i:08x}-aaaa", (), H100) for i in range(4)]
BOB = {"user": "bob", "run_id": "R", "node": 0, "since": 100.0, "gpus": [0]}


def state(holder: dict[str, object] | None = None, procs: int = 0) -> tuple[object, ...]:
    return (holder, None, [(4000 + p, "python", "alice") for p in range(procs)])


def uuids(*indices: int) -> list[str]:
    return [GPUS[i].uuid for i in indices]


def states(**by_index: tuple[object, ...]) -> dict[str, tuple[object, ...]]:
    found = {g.uuid: state() for g in GPUS}
    found.update({GPUS[int(k[1:])].uuid: v for k, v in by_index.items()})
    return found


def test_it_takes_free_gpus_and_never_held_or_busy_ones() -> None:
    found = states(g0=state(BOB), g2=state(procs=1))
    assert lease.choose(uuids(0, 1, 2, 3), 2, found, set(), "refuse") == (uuids(1, 3), False)
    assert lease.choose(uuids(0, 1, 2, 3), 3, found, set(), "refuse") == (None, False)  # GPU 0
    assert lease.choose(uuids(0, 1, 2, 3), 4, found, set(), "refuse") == (None, True)  # busy 2
    assert lease.choose(uuids(0, 1, 2, 3), 4, found, set(), "wait") == (None, False)
    assert lease.choose(uuids(0, 1, 2, 3), 3, found, set(), "share") == (uuids(1, 2, 3), False)


def test_launches_waiting_first_claim_what_they_wait_for() -> None:
    found = states(g0=state(BOB))
    everything = {"count": 4, "cands": uuids(0, 1, 2, 3), "busy": "refuse"}
    claimed = lease.claims([everything], found)
    assert claimed == set(uuids(0, 1, 2, 3))  # the free ones, then the held one it waits for
    assert lease.choose(uuids(1), 1, found, claimed, "refuse") == (None, False)
    half = {"count": 2, "cands": uuids(0, 1, 2, 3)}
    claimed = lease.claims([half], found)
    assert claimed == set(uuids(1, 2))  # free ones first: what is left may go to a later one
    assert lease.choose(uuids(0, 1, 2, 3), 1, found, claimed, "refuse") == (uuids(3), False)


def test_candidates_pins_and_the_variable() -> None:
    want = {"pins": [3, 1]}
    assert [g.index for g, _ in lease.candidates(GPUS, want, {})] == [3, 1]
    with pytest.raises(LeaseError, match=r"gpus: \[7\] names GPU 7 but this host has GPU"):
        lease.candidates(GPUS, {"pins": [7]}, {})
    assert [g.index for g, _ in lease.candidates(GPUS, {"cvd": "2,0"}, {})] == [2, 0]
    host_env = {"CUDA_VISIBLE_DEVICES": "1"}
    assert [g.index for g, _ in lease.candidates(GPUS, {}, host_env)] == [1]
    assert lease.candidates(GPUS, {"cvd": ""}, host_env) == []


def test_the_jobs_variable_names_indices_or_uuids_where_models_mix() -> None:
    taken = [(GPUS[1], GPUS[1].uuid), (GPUS[3], GPUS[3].uuid)]
    assert lease.visible_value(GPUS, taken) == "1,3"
    mixed = [*GPUS[:3], gpuinfo.Gpu(3, "GPU-00000003-aaaa", (), "NVIDIA A100-SXM4-40GB")]
    assert lease.visible_value(mixed, taken) == f"{GPUS[1].uuid},{GPUS[3].uuid}"
    mig = gpuinfo.Gpu(0, "GPU-m", ("MIG-a", "MIG-b"), H100)
    assert lease.visible_value([mig], [(mig, "MIG-a")]) == "MIG-a"


def test_a_hosts_words_are_data() -> None:
    word = ops.read_leasing({
        "t": "short", "now": 1000.0, "counter": 7, "never": True,
        "held": [{**BOB, "user": "b" * 500, "gpus": [0, "x", 1]}],
        "busy": [{"gpu": 2, "pid": 48211, "process": "/usr/bin/python3", "user": "alice"}],
    })  # fmt: skip
    assert word.kind == "short" and word.counter == 7 and word.never
    assert word.held[0].user == "b" * 64 and word.held[0].gpus == (0, 1)
    assert word.held[0].age == 900.0  # by the host's own clock, whatever the skew
    assert word.busy == ((2, GpuProcess(48211, 0, "/usr/bin/python3", "alice")),)
    for bad in ({"t": "sure"}, {"t": "held", "gpus": "all"}, {"t": "short", "held": [3]}):
        with pytest.raises((TypeError, ValueError, KeyError, AttributeError)):
            ops.read_leasing(bad)
    leases = ops.read_host_leases("node0", 0, {
        "now": 500.0, "gpus": [{"index": 0, "name": H100, "holder": {**BOB, "since": 800.0}},
                               {"index": 1, "name": H100, "procs": [[5, "python", "?"]]}],
        "queue": [{"user": "alice", "run_id": "Q", "key": 3, "count": 2}],
    })  # fmt: skip
    assert leases.gpus is not None
    assert [g.state for g in leases.gpus] == ["held", "busy"]
    assert leases.gpus[0].holder is not None and leases.gpus[0].holder.age == 0.0  # skewed
    assert leases.queue[0].key == 3 and leases.queue[0].count == 2


def leasing(**kw: object) -> ops.Leasing:
    return ops.Leasing(**kw)  # type: ignore[arg-type]


def test_a_refusal_names_who_holds_what_folded_over_hosts() -> None:
    bob = LeaseHolder("bob", "R1", 0, 300.0, "detached", "bob@laptop", (0, 1))
    found = {f"node{k}": leasing(kind="short", held=(bob,)) for k in range(4)}
    found["node4"] = leasing(kind="short", busy=((2, GpuProcess(48211, 0, "python", "eve")),))
    text = words.Shortage(found).refused()
    assert "bob's run R1 holds GPUs 0-1 on node[0-3] (since " in text
    assert "(5 min), detached)" in text
    assert "GPU 2 on node4 is busy: pid 48211 (python, eve)" in text
    assert text.endswith("--wait queues for them")
    ahead = LeaseHolder("alice", "Q", 0)
    waiting = words.Shortage({"node0": leasing(kind="wait", ahead=(ahead,), held=(bob,))})
    assert waiting.waiting().startswith("waiting for GPUs, 2nd in line: bob's run R1 holds")
    assert "first come: alice's run Q" in waiting.waiting()


def test_a_dead_runs_gpus_are_named_once() -> None:
    gone = LeaseHolder("bob", "R1", 0, 60.0, "attached", "", (0,))
    found = {"node0": leasing(kind="held", gpus=(0,), dead=(gone,)),
             "node1": leasing(kind="held", gpus=(0,), dead=(gone,))}  # fmt: skip
    (said,) = words.dead(found)
    assert said.startswith("bob's run R1 held GPU 0 on node[0-1] (since ")
    assert said.endswith("it died holding them (its supervisor was killed); taken")
    assert words.leased(found) == "leased GPU 0 on node[0-1]"
    left = dataclasses.replace(gone, swept=2)  # its processes that outlived it, killed
    (said,) = words.dead({"node0": leasing(kind="held", gpus=(0,), dead=(left,))})
    assert said.endswith("taken, and its 2 leftover processes killed")
    assert [words.age(s) for s in (5, 300, 7500, 90000)] == ["5 s", "5 min", "2 h 5 min",
                                                               "1 d 1 h"]  # fmt: skip
