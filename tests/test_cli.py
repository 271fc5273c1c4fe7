"""The command line: a user's mistake is one line and exit 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def ddptui(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "hosts:\n  - host: a\n    prot: 22\njob: {script: t.py}\n",
            "inv.yaml:3: unknown key `prot` in hosts[0] (check the spelling)",
        ),
        (
            "hosts:\n  - host: a\n    port: abc\njob: {script: t.py}\n",
            "inv.yaml:3: `hosts[0].port` must be an integer, got 'abc'",
        ),
        ("hosts: [\n", "inv.yaml:2: invalid YAML"),
    ],
)
def test_inventory_mistake_is_one_line_and_exit_2(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "inv.yaml").write_text(text)
    res = ddptui("--headless", "launch", "-i", "inv.yaml", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.startswith(f"ddptui: {message}")
    assert len(res.stderr.splitlines()) == 1
    assert "Traceback" not in res.stderr


def test_missing_inventory(tmp_path: Path) -> None:
    res = ddptui("--headless", "launch", "-i", str(tmp_path / "nope.yaml"))
    assert res.returncode == 2
    assert "nope.yaml: cannot read inventory: No such file or directory" in res.stderr


def test_headless_needs_a_command() -> None:
    res = ddptui("--headless")
    assert res.returncode == 2
    assert "--headless needs a command" in res.stderr
