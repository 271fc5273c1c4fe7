"""torchrun by hand on the test hosts, for the deep check's worker without ddptui's launcher:
one torchrun per host in its namespace, static rendezvous at the first host, gloo over eth0,
the way a job's are started. Shared by the e2e test and scripts/bench_fabric.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testhosts import REPO, TestCluster, veth_name

WORKER = REPO / "remote" / "host" / "fabric.py"
IFNAME = "eth0"  # every test host reaches its peers over eth0


@dataclass(frozen=True)
class NodeRun:
    """One host's torchrun: its exit status and where its output went."""

    code: int
    stdout: Path
    stderr: Path

    def out(self) -> str:
        return self.stdout.read_text(errors="replace")

    def err(self) -> str:
        return self.stderr.read_text(errors="replace")


def torchrun(
    cluster: TestCluster,
    hosts: Sequence[int],
    script: Sequence[str],
    out_dir: Path,
    *,
    port: int,
    timeout: float = 120.0,
) -> list[NodeRun]:
    """`python -m torch.distributed.run ... SCRIPT` on each of `hosts` at once (node ranks in
    that order, one process each); every host's result once all have ended. On timeout every
    torchrun's process group is killed and TimeoutError raised."""
    master = cluster.hosts[hosts[0]].addr
    runs, procs = [], []
    for k, i in enumerate(hosts):
        run = NodeRun(0, out_dir / f"node{k}.out", out_dir / f"node{k}.err")
        argv = [
            *("ip", "netns", "exec", cluster.hosts[i].netns),
            *("env", f"GLOO_SOCKET_IFNAME={IFNAME}", cluster.python, "-m"),
            *("torch.distributed.run", "--nnodes", str(len(hosts)), "--nproc-per-node", "1"),
            *("--rdzv-backend", "static", "--node-rank", str(k)),
            *("--master-addr", master, "--master-port", str(port), *script),
        ]
        with open(run.stdout, "wb") as out, open(run.stderr, "wb") as err:
            procs.append(
                subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
                )
            )
        runs.append(run)
    try:
        codes = [p.wait(timeout) for p in procs]
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"torchrun on hosts {list(hosts)} ran over {timeout} s") from None
    finally:
        for p in procs:  # each torchrun leads its own group: its workers go with it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return [NodeRun(c, r.stdout, r.stderr) for c, r in zip(codes, runs, strict=True)]


def sent_bytes(cluster: TestCluster, i: int) -> int:
    """Bytes host i has sent on its link so far: what its veth's far end received."""
    veth = veth_name(cluster.prefix, i)
    return int(Path(f"/sys/class/net/{veth}/statistics/rx_bytes").read_text())
