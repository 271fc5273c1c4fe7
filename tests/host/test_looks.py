"""The straggler's looks (remote/host/looks.py) read for real from a two-rank gloo job here: rank 1
sleeps on its "input" before each all_reduce, rank 0 waits for it there. Both sleep all along, so
the asleep look cannot tell them apart; the stacks' look can."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from test_vitals import SPY, needs_py_spy

from ddptui.remote.host import looks

JOB = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(1)
dist.all_reduce(t)
print("ready", flush=True)
while True:
    time.sleep(0.1 if rank == 0 else 0.3)  # rank 1 waits on its input 0.2 s longer
    dist.all_reduce(t)
"""


@pytest.fixture(scope="module")
def ranks() -> Iterator[dict[int, int]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    argv = [sys.executable, "-c", JOB]
    procs = [
        subprocess.Popen(argv, env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, text=True)
        for r in (0, 1)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        yield {p.pid: r for r, p in enumerate(procs)}
    finally:
        for p in procs:
            p.kill()
            p.wait()


@needs_py_spy
def test_the_stacks_tell_the_rank_that_waits_from_the_one_waited_for(
    ranks: dict[int, int],
) -> None:
    seen = looks.Looks()
    for _ in range(40):
        seen.look(ranks, SPY)
        time.sleep(0.05)
    (waited, n0), (waits, n1) = seen.waits[0], seen.waits[1]
    assert n0 >= 30 and n1 >= 30
    assert waited / n0 >= 0.4 and waits / n1 <= 0.15, seen.waits
    (asleep0, m0), (asleep1, m1) = seen.asleep[0], seen.asleep[1]
    assert asleep0 / m0 >= 0.8 and asleep1 / m1 >= 0.8  # both sleep: no tell there
    assert seen.counts(1) == {"asleep": [asleep1, m1], "waits": [waits, n1]}


def test_without_py_spy_only_the_asleep_look_counts(ranks: dict[int, int]) -> None:
    seen = looks.Looks()
    seen.look(ranks, None)
    assert seen.waits == {} and seen.counts(0) == {"asleep": [seen.asleep[0][0], 1]}


def test_what_counts_as_waiting_for_the_peers() -> None:
    c10d = {"function": "all_reduce", "path": "/v/torch/distributed/distributed_c10d.py"}
    script = {"function": "load_batch", "path": "/w/train.py"}
    backward = {"function": "_engine_run_backward", "path": "/v/torch/autograd/graph.py"}
    fsdp = {"function": "forward", "path": "/v/torch/distributed/fsdp/_fully_shard.py"}
    assert looks.waiting({"frames": [c10d, script], "active": True})  # NCCL spins in it
    assert not looks.waiting({"frames": [script], "active": False})  # asleep on its input
    assert looks.waiting({"frames": [backward, script], "active": False})  # DDP's reducer
    assert not looks.waiting({"frames": [backward, script], "active": True})  # computing
    assert not looks.waiting({"frames": [fsdp, script], "active": True})  # FSDP's compute
