"""job.sync, launcher and host side together, through local transports (the same code path as
SSH hosts: the host script runs in a python of its own, the data on its stdin)."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ddptui.remote import inventory
from ddptui.remote.agents import sync
from ddptui.remote.agents.fleet import Fleet
from ddptui.remote.events import CodeSynced, Event, from_json
from ddptui.remote.inventory import Inventory

REPO = Path(__file__).resolve().parents[2]


def project(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('v1')\n")
    (root / "pkg" / "model.py").write_text("W = 1\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    for junk in ("__pycache__/model.cpython-311.pyc", ".git/HEAD", "runs/r1/log", "data/big.bin"):
        (root / junk).parent.mkdir(parents=True, exist_ok=True)
        (root / junk).write_text("x")
    return root


def inv_for(tmp: Path, dests: list[Path], sync_text: str = "{exclude: [data/]}") -> Inventory:
    hosts = "".join(
        f"  - {{host: localhost, name: n{i}, transport: local, workdir: {d}}}\n"
        for i, d in enumerate(dests)
    )
    text = f"hosts:\n{hosts}job:\n  script: train.py\n  sync: {sync_text}\n"
    path = tmp / "src" / "inv.yaml"
    path.write_text(text)
    return inventory.load(path)


async def agents_push(
    inv: Inventory, dests: list[str | None], emit: Callable[[Event], None]
) -> list[CodeSynced]:
    """sync.push over a real agent per host (as a launch's preflight does)."""
    fleet = Fleet(inv.hosts)
    try:
        agents = [await fleet.agent(k, lambda e: None) for k in range(len(inv.hosts))]
        return await sync.push(inv, agents, dests, emit)
    finally:
        await fleet.close()


def push(inv: Inventory) -> list[CodeSynced]:
    seen: list[Event] = []
    results = asyncio.run(agents_push(inv, [h.workdir for h in inv.hosts], seen.append))
    assert sorted(seen, key=lambda e: getattr(e, "node_rank", 0)) == results  # one event each
    return results


def test_excluded_patterns() -> None:
    pats = [*sync.DEFAULT_EXCLUDE, "data/", "ckpt/*.pt", "*.ckpt"]
    assert sync.excluded("a/__pycache__/m.pyc", pats)
    assert sync.excluded(".git/HEAD", pats) and sync.excluded("x/.venv/bin/python", pats)
    assert sync.excluded("data", pats) and sync.excluded("data/raw/a.bin", pats)
    assert sync.excluded("ckpt/last.pt", pats) and not sync.excluded("ckpt/notes.txt", pats)
    assert sync.excluded("deep/w.ckpt", pats)
    assert not sync.excluded("src/data_loader.py", pats) and not sync.excluded("train.py", pats)


def test_push_only_what_changed(tmp_path: Path) -> None:
    project(tmp_path / "src")
    a, b = tmp_path / "a", tmp_path / "b"
    b.mkdir()
    (b / "outputs.txt").write_text("the host's own")  # never deleted
    inv = inv_for(tmp_path, [a, b])
    first = push(inv)
    assert [(r.files, r.unchanged, r.error) for r in first] == [(4, 0, "")] * 2  # + inv.yaml
    for dest in (a, b):
        files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
        assert [f for f in files if f != "outputs.txt"] == [
            "inv.yaml",
            "pkg/model.py",
            "run.sh",
            "train.py",
        ]
        assert os.access(dest / "run.sh", os.X_OK)
        src_mtime = (tmp_path / "src" / "train.py").stat().st_mtime
        assert abs((dest / "train.py").stat().st_mtime - src_mtime) < 1e-3
    assert (b / "outputs.txt").read_text() == "the host's own"
    again = push(inv)
    assert [(r.files, r.bytes, r.unchanged) for r in again] == [(0, 0, 4)] * 2
    os.utime(tmp_path / "src" / "pkg" / "model.py", (1e9, 1e9))  # a checkout: mtime, not content
    assert [(r.files, r.unchanged) for r in push(inv)] == [(0, 4)] * 2
    (tmp_path / "src" / "train.py").write_text("print('v2')\n")  # same size, other content
    (b / "pkg" / "model.py").write_text("W = 2\n")  # edited on one host only
    third = push(inv)
    assert [(r.files, r.unchanged) for r in third] == [(1, 3), (2, 2)]
    assert (a / "train.py").read_text() == (b / "train.py").read_text() == "print('v2')\n"
    assert (b / "pkg" / "model.py").read_text() == "W = 1\n"
    assert "2 files (0.0 kB) pushed, 2 unchanged" in third[1].text()


def test_a_failing_host_is_named(tmp_path: Path) -> None:
    project(tmp_path / "src")
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the workdir should be")
    results = push(inv_for(tmp_path, [tmp_path / "ok", blocked]))
    assert results[0].error == "" and results[0].files == 4
    assert results[1].host == "n1" and results[1].error.startswith("sync-put: ")
    assert "code sync to" in results[1].text() and str(blocked) in results[1].text()


def test_a_local_host_in_the_source_is_skipped(tmp_path: Path) -> None:
    src = project(tmp_path / "src")
    results = push(inv_for(tmp_path, [src]))
    assert results[0].skipped and results[0].files == 0
    assert not (src / "src").exists()


def test_a_missing_source_fails_every_host(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    results = push(inv_for(tmp_path, [tmp_path / "a"], "{from: nowhere}"))
    assert "nowhere is not a directory (job.sync.from)" in results[0].error


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("  sync: yes please\n", "inv.yaml:6: `job.sync`: must be true, false, or a mapping"),
        ("  sync: {form: .}\n", "inv.yaml:6: unknown key `form` in job.sync"),
        ("  sync: {exclude: data}\n", "inv.yaml:6: `job.sync.exclude` must be a list"),
        ("  sync:\n    exclude: [/]\n", "inv.yaml:7: `job.sync.exclude`: '/' is not a pattern"),
        ("  sync: true\n", "inv.yaml:6: `job.sync` needs a workdir for every SSH host: hosts[1]"),
    ],
)
def test_inventory_errors(text: str, message: str) -> None:
    head = "hosts:\n  - {host: a, workdir: /w}\n  - {host: b}\njob:\n  script: t.py\n"
    with pytest.raises(inventory.InventoryError) as err:
        inventory.parse(head + text, Path("inv.yaml"))
    assert str(err.value).startswith(message)


def test_inventory_shapes() -> None:
    head = "defaults: {workdir: /w}\nhosts: [{host: a}]\njob:\n  script: t.py\n"
    parse = lambda extra: inventory.parse(head + extra, Path("inv.yaml")).job.sync  # noqa: E731
    assert parse("") is None and parse("  sync: false\n") is None
    assert parse("  sync: true\n") == inventory.Sync()
    assert parse("  sync: {from: src, exclude: [data/]}\n") == inventory.Sync.model_validate(
        {"from": "src", "exclude": ["data/"]}
    )


def test_the_command_line_overrides_the_inventory(tmp_path: Path) -> None:
    head = "defaults: {workdir: /w}\nhosts: [{host: a}]\njob:\n  script: t.py\n"
    inv = inventory.parse(head + "  sync: {from: src}\n", tmp_path / "inv.yaml")
    assert inventory.with_sync(inv, False).job.sync is None
    assert inventory.with_sync(inv, True).job.sync == inv.job.sync  # keeps from and exclude
    off = inventory.parse(head, tmp_path / "inv.yaml")
    assert inventory.with_sync(off, True).job.sync == inventory.Sync()
    bare = inventory.parse("hosts: [{host: a}]\njob: {script: t.py}\n", tmp_path / "inv.yaml")
    with pytest.raises(inventory.InventoryError, match="needs a workdir for every SSH host"):
        inventory.with_sync(bare, True)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--headless", "launch", "--sync"], "`job.sync` needs a workdir for every SSH host"),
        (["launch", "--no-sync"], "--sync and --no-sync need --headless"),
    ],
)
def test_sync_flags_mistakes(tmp_path: Path, args: list[str], words: str) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text("hosts: [{host: 10.0.0.1}]\njob: {script: t.py}\n")
    argv = [sys.executable, "-m", "ddptui.tui.cli", *args, "-i", str(inv)]
    res = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert res.returncode == 2 and words in res.stderr and len(res.stderr.splitlines()) == 1


def test_a_source_too_big_is_refused_before_reading_it(tmp_path: Path) -> None:
    root = project(tmp_path / "src")
    (root / "weights.bin").write_bytes(b"\0" * 5000)
    with pytest.raises(sync.SourceError) as err:
        sync.collect(root, sync.DEFAULT_EXCLUDE, max_bytes=4000)
    assert "largest: weights.bin, " in str(err.value) and "job.sync.exclude" in str(err.value)


def test_the_event_survives_json() -> None:
    ev = CodeSynced("node1", 1, "~/proj", 3, 12_000, 197, 0.21)
    assert from_json(ev.to_json()) == ev
    assert ev.text() == "code synced to ~/proj: 3 files (12.0 kB) pushed, 197 unchanged, 0.21 s"


async def test_the_dashboard_tells_what_was_pushed_and_what_failed(tmp_path: Path) -> None:
    from apptools import FakeClusters, FakeRuns, local_inventory, settle

    from ddptui.tui.dashboard.app import create_app

    def script(run_id: str) -> list[Event]:
        return [
            CodeSynced("node0", 0, "/w", 3, 2_500_000, 197, 0.2),
            CodeSynced("node1", 1, "/w", error="put: No space left on device: /w/train.py"),
        ]

    inv = local_inventory(tmp_path, [])
    app = create_app(inv, run_factory=FakeRuns(script, finish=True),
                     cluster_factory=FakeClusters(), start="launch")  # fmt: skip
    async with app.run_test() as pilot:
        await settle(pilot)
        assert app.worker is not None
        await app.worker.wait()
        await settle(pilot)
        shown = {(n.message, n.severity) for n in app._notifications}
    assert ("node0: code synced to /w: 3 files (2.5 MB) pushed, 197 unchanged, 0.20 s",
            "information") in shown  # fmt: skip
    assert ("node1: code sync to /w failed: put: No space left on device: /w/train.py",
            "error") in shown  # fmt: skip


def test_a_local_host_without_workdir_is_skipped(tmp_path: Path) -> None:
    project(tmp_path / "src" / "code")
    path = tmp_path / "src" / "inv.yaml"
    path.write_text("hosts: [{host: localhost, transport: local}]\n"
                    "job: {script: train.py, sync: {from: code}}\n")  # fmt: skip
    inv = inventory.load(path)
    [result] = asyncio.run(agents_push(inv, [str(path.parent)], lambda e: None))
    assert result.skipped and not (tmp_path / "src" / "train.py").exists()


@pytest.mark.security
def test_planted_tmp_symlinks_are_never_written_through(tmp_path: Path, victim: Path) -> None:
    """The tmp was `<target>.ddptui-sync.<host>.<pid>`: a neighbour who may write the workdir
    planted one for every likely pid and got the file they point at overwritten, made 0644."""
    project(tmp_path / "src")
    dest = tmp_path / "shared"
    dest.mkdir()
    host, pid = socket.gethostname(), os.getpid()
    for name in ("train.py", "run.sh", "inv.yaml"):
        for p in range(pid, pid + 3000):
            (dest / f"{name}.ddptui-sync.{host}.{p}").symlink_to(victim)
    (result,) = push(inv_for(tmp_path, [dest]))
    assert result.error == "" and result.files == 4
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert (dest / "train.py").read_text() == "print('v1')\n"


@pytest.mark.security
@pytest.mark.parametrize("planted", ["pkg", "train.py"])
def test_a_symlinked_directory_or_target_is_refused(
    tmp_path: Path, victim: Path, planted: str
) -> None:
    project(tmp_path / "src")
    dest = tmp_path / "shared"
    dest.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (dest / planted).symlink_to(elsewhere if planted == "pkg" else victim)
    (result,) = push(inv_for(tmp_path, [dest]))
    assert f"refusing '{planted if planted != 'pkg' else 'pkg/model.py'}'" in result.error
    assert not any(elsewhere.iterdir()) and victim.read_text() == "precious\n"


@pytest.mark.security
def test_no_setuid_bits_and_no_secrets_are_pushed(tmp_path: Path) -> None:
    src = project(tmp_path / "src")
    (src / "run.sh").chmod(0o6755)
    for secret in (".ssh/id_ed25519", ".aws/credentials", ".env", "certs/key.pem", ".netrc"):
        (src / secret).parent.mkdir(exist_ok=True)
        (src / secret).write_text("token")
    dest = tmp_path / "dest"
    (result,) = push(inv_for(tmp_path, [dest]))
    assert result.error == "" and result.files == 4, result
    assert stat.S_IMODE((dest / "run.sh").stat().st_mode) == 0o755
    assert sorted(p.name for p in dest.rglob("*") if p.is_file()) == [
        "inv.yaml", "model.py", "run.sh", "train.py"
    ]  # fmt: skip
