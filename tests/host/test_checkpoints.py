"""job.checkpoint, host side (remote/host/checkpoints.py): the newest whole checkpoint of the job's
directory, its step from its name, and node 0's look at each new save."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ddptui.remote.host import checkpoints


def save(folder: Path, name: str, age: float, folder_entry: bool = False) -> Path:
    """A checkpoint written `age` seconds ago (a file, or a folder of one file)."""
    path = folder / name
    if folder_entry:
        path.mkdir(parents=True)
        (path / "model.pt").write_bytes(b"x")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    at = time.time() - age
    for p in (path / "model.pt", path) if folder_entry else (path,):
        os.utime(p, (at, at))
    return path


@pytest.mark.parametrize(
    ("name", "step"),
    [("step_000010.pt", 10), ("epoch=3-step=1200.ckpt", 1200), ("checkpoint-500", 500),
     ("model_7.pt", 7), ("latest.pt", None)],
)  # fmt: skip
def test_the_step_is_read_from_the_name(name: str, step: int | None) -> None:
    assert checkpoints.step_of(name) == step


def test_the_newest_whole_checkpoint_counts_not_a_save_under_way(tmp_path: Path) -> None:
    assert checkpoints.newest(str(tmp_path / "none")) is None
    save(tmp_path, "step_5.pt", 30)
    save(tmp_path, "checkpoint-10", 20, folder_entry=True)
    save(tmp_path, "step_15.pt.tmp", 1)  # written under a temporary name, then renamed
    save(tmp_path, ".step_15.pt", 1)
    found = checkpoints.newest(str(tmp_path))
    assert found is not None and (found["path"], found["step"]) == (
        str(tmp_path / "checkpoint-10"),
        10,
    )
    save(tmp_path, "step_15.pt", 0.2)  # still being written: not whole yet
    found = checkpoints.newest(str(tmp_path))
    assert found is not None and found["step"] == 10
    found = checkpoints.newest(str(tmp_path), settle=0)  # the job is over: nobody writes
    assert found is not None and found["step"] == 15


def test_node_0_says_each_new_save_once(tmp_path: Path) -> None:
    said: list[int | None] = []
    saves = checkpoints.Saves(str(tmp_path), lambda c: said.append(c["step"]))
    assert saves.look() is None
    save(tmp_path, "step_5.pt", 10)
    saves.look()
    saves.look()
    save(tmp_path, "step_10.pt", 5)
    assert saves.look()["step"] == 10  # type: ignore[index]
    assert said == [5, 10]


def test_where_is_relative_to_the_workdir(tmp_path: Path) -> None:
    assert checkpoints.where("ckpt", str(tmp_path)) == str(tmp_path / "ckpt")
    assert checkpoints.where("/abs/ckpt", str(tmp_path)) == "/abs/ckpt"
    assert checkpoints.where("~/ckpt", None) == os.path.expanduser("~/ckpt")


def test_the_checks_mark_is_seen_where_the_directory_is_or_will_be(tmp_path: Path) -> None:
    token = "0123456789abcdef0123456789abcdef"
    spec = {"dir": "shared/ckpt", "workdir": str(tmp_path), "token": token}
    (tmp_path / "shared").mkdir()
    assert checkpoints.mark(spec) == {"error": None}  # in shared/: ckpt is not made yet
    here = checkpoints.look({"dir": str(tmp_path / "shared" / "ckpt"), "see": token}, None)
    assert (here["exists"], here["writable"], here["seen"]) == (False, True, True)
    elsewhere = checkpoints.look({"dir": "ckpt", "see": token}, str(tmp_path / "other"))
    assert elsewhere["seen"] is False
    assert checkpoints.mark({**spec, "unmark": True}) == {"error": None}
    assert list((tmp_path / "shared").iterdir()) == []
    with pytest.raises(ValueError):
        checkpoints.look({"dir": "ckpt", "see": "../x"}, str(tmp_path))
