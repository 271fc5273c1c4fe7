"""The job's code per host: its fingerprint (script hash, git commit and dirtiness), compared."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from probetools import run_probe

from ddptui.remote import inventory
from ddptui.remote.checks import judge as checks
from ddptui.remote.checks import probe
from ddptui.remote.events import HostChecked
from ddptui.remote.host import probe as probe_host
from ddptui.tui.headless import check as check_report

A, B = "a" * 64, "b" * 64


def host(k: int, **facts: Any) -> HostChecked:
    return HostChecked(f"node{k}", k, {"reachable": True, "workdir": "/w", **facts})


def code_findings(*hosts: HostChecked) -> list[tuple[str, str]]:
    return [(f.level, f.message) for f in checks.across(hosts) if f.check == "same-code"]


def test_fingerprint_text() -> None:
    assert checks.fingerprint({"script_sha256": A}) == "sha aaaaaaaaaa"
    git = {"script_sha256": A, "git_commit": "1234567890abcdef", "git_dirty": 0}
    assert checks.fingerprint(git) == "sha aaaaaaaaaa git 1234567890"
    dirty = {**git, "git_dirty": 2, "git_dirty_sha256": "ff" * 32}
    assert checks.fingerprint(dirty) == "sha aaaaaaaaaa git 1234567890+2 dirty ffffffff"
    assert checks.fingerprint(dirty, git=False) == "sha aaaaaaaaaa"
    assert checks.fingerprint({"script_sha256": None, "git_commit": "1"}) is None


def test_same_code_everywhere_is_ok() -> None:
    hosts = [host(k, script_sha256=A, git_commit="c0ffee") for k in range(3)]
    assert code_findings(*hosts) == [
        ("ok", "code (script hash, git commit) sha aaaaaaaaaa git c0ffee on every host")
    ]


def test_different_scripts_warn_naming_the_hosts() -> None:
    hosts = [host(0, script_sha256=A), host(1, script_sha256=B), host(2, script_sha256=A)]
    assert code_findings(*hosts) == [
        (
            "warning",
            "code (script hash) differs across hosts: sha aaaaaaaaaa on node0, node2; "
            "sha bbbbbbbbbb on node1 (job.sync pushes the local code to every host)",
        )
    ]


def test_dirty_trees_differ_by_their_changes() -> None:
    same = {"script_sha256": A, "git_commit": "c0ffee", "git_dirty": 1}
    hosts = [host(0, **same, git_dirty_sha256=A), host(1, **same, git_dirty_sha256=B)]
    [(level, text)] = code_findings(*hosts)
    assert level == "warning" and "+1 dirty aaaaaaaa on node0; " in text
    assert "+1 dirty bbbbbbbb on node1" in text


def test_a_host_without_git_compares_by_the_script_alone() -> None:
    hosts = [host(0, script_sha256=A, git_commit="c0ffee"), host(1, script_sha256=A)]
    assert code_findings(*hosts) == [("ok", "code (script hash) sha aaaaaaaaaa on every host")]


def test_a_missing_script_is_not_compared() -> None:
    hosts = [host(0, script_sha256=A), host(1, script_sha256=None), host(2, script_sha256=A)]
    assert code_findings(*hosts) == []  # node1's missing script is a failure of its own


def test_git_error_is_a_warning() -> None:
    checked = probe.checked(
        inventory.parse("hosts: [{host: a}]\njob: {script: t.py}\n", Path("i.yaml")).hosts[0],
        {"reachable": True, "workdir": "/w", "git_error": "git took over 5 s"},
    )
    [warning] = [f for f in checked.findings if f.check == "code"]
    assert warning.level == "warning" and "git in /w: git took over 5 s" in warning.message


def git(repo: Path, *args: str) -> str:
    argv = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args]
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


def probe_facts(tmp_path: Path, workdir: Path) -> dict[str, Any]:
    text = f"hosts: [{{host: localhost, transport: local, workdir: {workdir}}}]\n"
    inv = inventory.parse(text + "job: {script: train.py}\n", tmp_path / "inv.yaml")
    return run_probe(inv).facts


def test_probe_reads_the_hash_commit_and_changes(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text("print(1)\n")
    (repo / "model.py").write_text("W = 1\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    head = git(repo, "rev-parse", "HEAD")
    clean = probe_facts(tmp_path, repo)
    assert clean["script_sha256"] == probe_host.file_sha256(str(repo / "train.py"))
    assert (clean["git_commit"], clean["git_dirty"], clean["git_dirty_sha256"]) == (head, 0, None)
    assert clean["code"] == checks.fingerprint(clean) and head[:10] in clean["code"]
    (repo / "model.py").write_text("W = 2\n")  # the script is the same; the tree is not
    (repo / "notes.txt").write_text("untracked: not the code")
    dirty = probe_facts(tmp_path, repo)
    assert dirty["script_sha256"] == clean["script_sha256"] and dirty["git_dirty"] == 1
    (repo / "model.py").write_text("W = 3\n")
    other = probe_facts(tmp_path, repo)
    assert other["git_dirty_sha256"] != dirty["git_dirty_sha256"] and other["code"] != dirty["code"]


def test_without_git_the_script_hash_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    monkeypatch.setattr(probe_host.shutil, "which", lambda name: None)
    info = probe_host.code_info(probe_host.workdir_info(str(tmp_path), "train.py"))
    assert info == {"script_sha256": probe_host.file_sha256(str(tmp_path / "train.py"))}
    git(tmp_path, "init", "-q")  # a work tree without a commit yet: no git part either
    assert probe_facts(tmp_path, tmp_path)["git_commit"] is None


def test_the_table_shows_the_fingerprint() -> None:
    h = host(0, code=checks.fingerprint({"script_sha256": A, "git_commit": "c0ffee"}))
    assert "sha aaaaaaaaaa git c0ffee" in check_report.row(h)
    assert check_report.COLUMNS[-2] == "code"
