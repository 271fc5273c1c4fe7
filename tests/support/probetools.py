"""The probe run here through the local transport: an inventory of two local nodes, and the
findings of one host's probe by check."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import nvidia_smi
import pytest

from remote import inventory, probe
from remote.events import HostChecked
from remote.transport import LocalTransport


def local_inventory(tmp_path: Path, job: str = "", host: str = "") -> inventory.Inventory:
    (tmp_path / "train.py").write_text("print('hi')\n")
    text = (
        f"defaults:\n  transport: local\n  workdir: {tmp_path}\n{host}"
        "hosts:\n  - host: localhost\n    name: node0\n  - host: localhost\n    name: node1\n"
        f"job:\n  script: train.py\n  master_port: {free_port()}\n{job}"
    )
    return inventory.parse(text, tmp_path / "inventory.yaml")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        port: int = s.getsockname()[1]
        return port


def run_probe(inv: inventory.Inventory, k: int = 0) -> HostChecked:
    host = inv.hosts[k]
    transport = LocalTransport(host)
    return asyncio.run(
        probe.probe(transport, inv.job, "127.0.0.1", workdir=host.workdir, connect_s=0.0)
    )


def levels(checked: HostChecked) -> dict[str, str]:
    return {f.check: f.level for f in checked.findings}


def with_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, machine: str) -> None:
    nvidia_smi.install(tmp_path / "bin", machine)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")


def message(checked: HostChecked, check: str) -> str:
    return next(f.message for f in checked.findings if f.check == check)
