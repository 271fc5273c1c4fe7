"""The headless CLI ending the way a terminal ends it, on real sshd test hosts: a closed pipe
(`| head -3`), a closed terminal (SIGHUP), Ctrl-C while a host is still being connected to.
Each stops every host like Ctrl-C, writes summary.json, prints no traceback, leaves nothing."""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from e2etools import Cli, assert_nothing_left, wait_for
from testhosts import REPO, TestCluster

pytestmark = pytest.mark.e2e

TRAIN = {"script": "examples/train.py", "nproc_per_node": 2, "master_port": 29641}
LONG = ["--epochs", "1000", "--step-time", "0.1"]  # runs until stopped


def no_traceback_of_ours(stderr: str) -> None:
    """Ranks' tracebacks arrive tagged (`[node0] Traceback`); ddptui's own would not be."""
    for bad in ("Traceback", "Exception ignored", "BrokenPipeError", "KeyboardInterrupt"):
        assert not any(line.startswith(bad) for line in stderr.splitlines()), stderr


def test_head_closing_the_output_stops_the_run(cluster: TestCluster, tmp_path: Path) -> None:
    inv = cluster.write_inventory(tmp_path / "inv.yaml", {**TRAIN, "args": LONG})
    run_dir, err = tmp_path / "run", tmp_path / "err.txt"
    argv = [sys.executable, "-m", "ddptui.tui.cli", "--headless", "launch", "-i", str(inv)]
    with err.open("w") as err_file:  # `ddptui ... | head -3`, head being this test
        proc = subprocess.Popen(
            [*argv, "--run-dir", str(run_dir)], stdout=subprocess.PIPE, stderr=err_file, cwd=REPO
        )
        assert proc.stdout is not None
        head = [proc.stdout.readline() for _ in range(3)]
        proc.stdout.close()
        code = proc.wait(90)
    assert all(line.startswith(b"[r") for line in head), head
    stderr = err.read_text()
    assert code == 130, stderr
    assert "ddptui: output closed: stopping the run" in stderr
    no_traceback_of_ours(stderr)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["exit_code"]) == ("stopped", 130)
    assert_nothing_left(cluster, summary["run_id"])
    for r in range(6):  # every line still reached its log
        assert f"rank {r}/6" in (run_dir / f"rank-{r}.log").read_text()
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [run_dir, *run_dir.iterdir()]}
    assert modes == {"run": 0o700} | {name: 0o600 for name in modes if name != "run"}, modes


def test_sighup_stops_the_run_like_ctrl_c(cluster: TestCluster, tmp_path: Path) -> None:
    inv = cluster.write_inventory(tmp_path / "inv.yaml", {**TRAIN, "args": LONG})
    cli = Cli(inv, tmp_path / "run")
    run_id = cli.run_id()
    cli.wait_ranks(6)
    cli.proc.send_signal(signal.SIGHUP)
    assert cli.wait(60) == 130, cli.stderr
    assert "ddptui: terminal closed (SIGHUP): stopping the run" in cli.stderr
    no_traceback_of_ours(cli.stderr)
    summary = cli.summary()
    assert (summary["status"], summary["exit_code"]) == ("stopped", 130)
    assert_nothing_left(cluster, run_id)


def blackholed(cluster: TestCluster, tmp_path: Path) -> Path:
    """node0 answers; the other host's address answers nothing (connecting would take ~3-10 s)."""
    hosts = [0, {"host": cluster.unused_addr, "name": "blackhole"}]
    return cluster.write_inventory(tmp_path / "inv.yaml", TRAIN, hosts=hosts)


def connecting(pid: int, addr: str) -> bool:
    """Whether process `pid` is waiting on a TCP connect to `addr` (SYN sent, no answer)."""
    out = subprocess.run(
        ["ss", "-Htnp", "state", "syn-sent", "dst", addr], capture_output=True, text=True
    ).stdout
    return f"pid={pid}," in out


def interrupt_while_connecting(proc: subprocess.Popen[bytes], addr: str) -> float:
    """Ctrl-C once ddptui is connecting to `addr`; how long it took to exit after."""
    wait_for(lambda: connecting(proc.pid, addr), 60, f"ddptui to connect to {addr}")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(30)
    return time.monotonic() - t0


def test_ctrl_c_while_connecting_acts_at_once(cluster: TestCluster, tmp_path: Path) -> None:
    cli = Cli(blackholed(cluster, tmp_path), tmp_path / "run")
    took = interrupt_while_connecting(cli.proc, cluster.unused_addr)
    assert cli.proc.returncode == 130, cli.stderr
    assert took < 2, f"exit took {took:.1f} s after Ctrl-C"
    no_traceback_of_ours(cli.stderr)
    summary = cli.summary()
    assert (summary["status"], summary["exit_code"]) == ("stopped", 130)
    assert_nothing_left(cluster, summary["run_id"])


def test_ctrl_c_during_a_check_acts_at_once(cluster: TestCluster, tmp_path: Path) -> None:
    inv = blackholed(cluster, tmp_path)
    argv = [sys.executable, "-m", "ddptui.tui.cli", "--headless", "check", "-i", str(inv)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    took = interrupt_while_connecting(proc, cluster.unused_addr)
    assert proc.stderr is not None
    stderr = proc.stderr.read().decode()
    assert proc.returncode == 130, stderr
    assert took < 2, f"exit took {took:.1f} s after Ctrl-C"
    no_traceback_of_ours(stderr)
