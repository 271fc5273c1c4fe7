"""`ddptui completion SHELL`: commands, options, inventory files and run ids complete, in a
real bash; the scripts for zsh and fish are at least read by those shells where installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNS = ("20260102-080000-beef", "20260103-090000-cafe")


def ddptui(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddptui.tui.cli", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=env,
    )  # fmt: skip


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """Two runs under the runs root, `ddptui` on PATH, an inventory and a stray file here."""
    for run_id in RUNS:
        run = tmp_path / "data" / "ddptui" / "runs" / run_id
        run.mkdir(parents=True)
        (run / "run.json").write_text("{}")
    (tmp_path / "data" / "ddptui" / "runs" / "not-a-run").mkdir()
    (tmp_path / "cluster.yaml").write_text("")
    (tmp_path / "notes.txt").write_text("")
    bin_dir = Path(sys.executable).parent
    path = f"{bin_dir}:{os.environ['PATH']}"
    return {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "PATH": path}


def complete_bash(env: dict[str, str], cwd: Path, *words: str) -> list[str]:
    script = ddptui("completion", "bash", env=env).stdout
    line = " ".join(words)
    probe = (
        f"{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; "
        'COMP_POINT=${#COMP_LINE}; _shtab_ddptui; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, env=env,
                         cwd=cwd, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return sorted(set(out.stdout.split()))


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_commands_options_inventories_and_runs(
    home: dict[str, str], tmp_path: Path
) -> None:
    s_commands = ["schema", "serve", "ssh", "stacks", "stop"]
    assert complete_bash(home, tmp_path, "ddptui", "s") == s_commands
    assert complete_bash(home, tmp_path, "ddptui", "check", "--de") == ["--deep", "--deep-seconds"]
    assert complete_bash(home, tmp_path, "ddptui", "-i", "") == ["cluster.yaml", "data"]
    assert complete_bash(home, tmp_path, "ddptui", "attach", "2026") == sorted(RUNS)
    assert complete_bash(home, tmp_path, "ddptui", "stop", "20260103") == [RUNS[1]]
    assert complete_bash(home, tmp_path, "ddptui", "completion", "") == ["bash", "fish", "zsh"]


def test_run_ids_newest_first_without_the_engine(home: dict[str, str]) -> None:
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ddptui.tui.cli", "_run-ids"],
        capture_output=True, text=True, env=home, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert res.stdout.splitlines() == sorted(RUNS, reverse=True)
    loaded = {line.split("|")[-1].strip() for line in res.stderr.splitlines()}
    assert not {"pydantic", "asyncssh", "yaml", "ddptui.remote.runs"} & loaded
    assert "_run-ids" not in ddptui("--help").stdout


@pytest.mark.skipif(shutil.which("fish") is None, reason="no fish")
def test_fish_completes_the_same(home: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "ddptui.fish"
    script.write_text(ddptui("completion", "fish", env=home).stdout)

    def complete(line: str) -> list[str]:
        probe = f"source {script}; complete -C '{line}'"
        out = subprocess.run(["fish", "-c", probe], capture_output=True, text=True, env=home,
                             cwd=tmp_path, timeout=60)  # fmt: skip
        return sorted(word.split("\t")[0] for word in out.stdout.splitlines())

    assert complete("ddptui sc") == ["schema"]
    assert complete("ddptui stacks 2026") == sorted(RUNS)
    assert complete("ddptui -i clu") == ["cluster.yaml"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="no zsh")
def test_zsh_reads_its_script(home: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "_ddptui"
    script.write_text(ddptui("completion", "zsh", env=home).stdout)
    res = subprocess.run(["zsh", "-n", str(script)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def test_help_loads_no_completion_or_schema_library() -> None:
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ddptui.tui.cli", "--help"],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    loaded = {line.split("|")[-1].strip() for line in res.stderr.splitlines()}
    assert (
        loaded
        and not {"shtab", "jsonschema", "ddptui.remote.schema", "ddptui.remote.shell"} & loaded
    )
