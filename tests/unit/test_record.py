"""The run directory: every line kept at any number of ranks, bytes as they came, owner only."""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddptui.remote import inventory
from ddptui.remote.events import (
    AttemptResult,
    Failure,
    LogBatch,
    NodeStarted,
    RunFinished,
    RunRestarting,
    RunStarted,
    from_json,
)
from ddptui.remote.store import record, runs
from ddptui.remote.store.record import Recorder, RunDirError, usable_dir


@pytest.fixture
def few_files() -> Iterator[None]:
    """256 open files to spare, as on macOS (Linux: 1024), beside what the test process holds
    already (in a whole run, earlier tests' sockets may not all be closed yet)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 256 + held), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_1024_ranks_under_256_open_files_keep_every_line(few_files: None, tmp_path: Path) -> None:
    ranks, rounds = 1024, 5
    rec = Recorder(tmp_path / "run")
    for r in range(rounds):
        for node in range(ranks // 8):  # 128 hosts x 8 ranks, each batch one rank's lines
            for rank in range(node * 8, node * 8 + 8):
                lines = tuple((rank, f"rank {rank} round {r} line {i}") for i in range(3))
                rec(LogBatch(f"node{node}", node, "stdout", lines))
        mixed = tuple((rank, f"rank {rank} round {r} mixed") for rank in range(0, ranks, 7))
        rec(LogBatch("node0", 0, "stderr", (*mixed, (None, f"torchrun round {r}"))))
    rec.close()
    for rank in range(ranks):
        want = []
        for r in range(rounds):
            want += [f"rank {rank} round {r} line {i}" for i in range(3)]
            want += [f"rank {rank} round {r} mixed"] if rank % 7 == 0 else []
        assert (tmp_path / "run" / f"rank-{rank}.log").read_text().splitlines() == want
    node0 = (tmp_path / "run" / "node-0.log").read_text().splitlines()
    assert node0 == [f"torchrun round {r}" for r in range(rounds)]


def test_lines_wait_for_the_writer_in_order_and_offsets_count_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines wait in lists and a thread writes them (a hand-over every 50 characters here):
    each log keeps its order, and offsets.json counts what the logs hold at the checkpoint."""
    monkeypatch.setattr(record, "WAITING_MAX", 50)
    rec = Recorder(tmp_path / "run")
    for i in range(200):
        lines = ((0, f"zero {i}"), (1, f"one {i}"), (None, f"own {i}"))
        rec(LogBatch("node0", 0, "stdout", lines if i % 2 else lines[:1]))
        if i == 100:
            rec.checkpoint({0: 1234})
    rec.close()
    run = tmp_path / "run"
    assert (run / "rank-0.log").read_text().splitlines() == [f"zero {i}" for i in range(200)]
    assert (run / "rank-1.log").read_text().splitlines() == [f"one {i}" for i in range(1, 200, 2)]
    node = json.loads((run / "offsets.json").read_text())["0"]
    assert node["offset"] == 1234
    sizes = {"rank-0.log": 101, "rank-1.log": 50, "node-0.log": 50}  # lines up to i == 100
    for name, lines in sizes.items():
        held = (run / name).read_text().splitlines(keepends=True)[:lines]
        assert node["files"][name] == len("".join(held))


def test_lines_go_back_to_their_bytes(tmp_path: Path) -> None:
    raw = b"caf\xc3\xa9 \xff\xfe latin-1 \xe9 and a NUL \x00 end"
    line = raw.decode("utf-8", "surrogateescape")  # as the supervisor's lines arrive
    rec = Recorder(tmp_path / "run")
    rec(LogBatch("node0", 0, "stdout", ((0, line), (0, "lone \ud800 surrogate"))))
    rec.close()
    assert (tmp_path / "run" / "rank-0.log").read_bytes() == raw + b"\nlone \\ud800 surrogate\n"


def test_run_dirs_and_files_are_the_owners_alone(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    run_dir = tmp_path / "made" / "by" / "ddptui"
    rec = Recorder(run_dir)
    rec(RunStarted("r1", str(run_dir), ("node0",), 1, "torchrun"))
    rec(LogBatch("node0", 0, "stdout", ((0, "secret token"),)))
    rec(RunFinished("succeeded", 0, 1.0))
    rec.close()
    for d in (tmp_path / "made", tmp_path / "made" / "by", run_dir):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    names = {p.name: stat.S_IMODE(p.stat().st_mode) for p in run_dir.iterdir()}
    assert names == {
        "events.jsonl": 0o600,
        "rank-0.log": 0o600,
        "summary.json": 0o600,
        ".writer": 0o600,  # the lock of the process that records (one at a time)
    }
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "succeeded"
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755  # what it did not make, it left


def test_a_directory_holding_a_run_is_never_mixed_into(tmp_path: Path) -> None:
    Recorder(tmp_path / "run").close()
    with pytest.raises(FileExistsError):
        Recorder(tmp_path / "run")
    with pytest.raises(RunDirError, match="not empty"):
        usable_dir(tmp_path / "run", empty=True)


def test_unusable_directories_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(RunDirError, match=r"file: not a directory \(a file is in the way\)$"):
        usable_dir(tmp_path / "file", empty=True)
    with pytest.raises(RunDirError, match="not a directory"):
        usable_dir(tmp_path / "file" / "run", empty=True)
    assert usable_dir(tmp_path / "new", empty=True).is_dir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert usable_dir(tmp_path / "full", empty=False)  # a root of runs may hold runs
    if os.geteuid() != 0:  # root writes anywhere
        (tmp_path / "ro").mkdir(mode=0o500)
        with pytest.raises(RunDirError, match="not writable"):
            usable_dir(tmp_path / "ro", empty=True)


def test_a_run_dir_reused_by_another_run_is_listed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--run-dir DIR twice (the first run's files removed in between): the first run's link
    now leads to the second run, which must not be listed under both ids."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    inv = inventory.parse("hosts: [{host: a}]\njob: {script: t.py}\n", tmp_path / "inv.yaml")
    run_dir = tmp_path / "run"
    for run_id in ("20250101-120000-aaaa", "20250101-130000-bbbb"):
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir()
        runs.register(run_dir, run_id, inv)
    assert [r.run_id for r in runs.all_runs()] == ["20250101-130000-bbbb"]


def test_a_second_viewer_of_a_run_leaves_the_logs_to_the_first(tmp_path: Path) -> None:
    """`stop` (or another attach) beside an attach: one process writes the run dir; the other
    shows the run and neither cuts back nor appends to the logs."""
    first = Recorder(tmp_path / "run")
    first(RunStarted("r1", str(tmp_path / "run"), ("node0",), 1, "torchrun"))
    first(LogBatch("node0", 0, "stdout", ((0, "one"),)))
    second = Recorder(tmp_path / "run", resume=True)
    assert second.passive
    second(LogBatch("node0", 0, "stdout", ((0, "one"),)))
    first(LogBatch("node0", 0, "stdout", ((0, "two"),)))
    second.checkpoint({0: 10})
    second(RunFinished("stopped", 130, 1.0))
    second.close()
    first.close()
    assert (tmp_path / "run" / "rank-0.log").read_text() == "one\ntwo\n"
    assert not (tmp_path / "run" / "offsets.json").exists()
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "stopped"
    third = Recorder(tmp_path / "run", resume=True)  # the first one is gone: this one writes
    assert not third.passive
    third.close()


@pytest.mark.security
def test_a_planted_log_symlink_is_never_written_through(tmp_path: Path, victim: Path) -> None:
    """A rank log planted as a symlink (by someone who could write the run dir before the CLI
    refused such dirs) made the launcher append to the planter's choice of file."""
    rec = Recorder(tmp_path / "run")
    (tmp_path / "run" / "rank-0.log").symlink_to(victim)
    with pytest.raises(FileExistsError):
        rec(LogBatch("node0", 0, "stdout", ((0, "from rank 0"),)))
    rec.close()
    assert victim.read_text() == "precious\n"


def test_a_nodes_rank_logs_are_made_as_it_starts(tmp_path: Path, victim: Path) -> None:
    """Made with their first lines, 4,096 ranks' logs held the dashboard's loop ~0.5 s as the
    job began to print. A planted one is left alone: its first line still fails."""
    rec = Recorder(tmp_path / "run")
    (tmp_path / "run" / "rank-1.log").symlink_to(victim)
    rec(NodeStarted("node0", 0, 1, "h0", (0, 1)))
    assert (tmp_path / "run" / "rank-0.log").read_text() == ""
    rec(LogBatch("node0", 0, "stdout", ((0, "from rank 0"),)))
    with pytest.raises(FileExistsError):
        rec(LogBatch("node0", 0, "stdout", ((1, "from rank 1"),)))
    rec.close()
    assert (tmp_path / "run" / "rank-0.log").read_text() == "from rank 0\n"
    assert victim.read_text() == "precious\n"


@pytest.mark.security
def test_a_log_swapped_for_a_symlink_on_resume_is_not_followed(
    tmp_path: Path, victim: Path
) -> None:
    rec = Recorder(tmp_path / "run")
    rec(LogBatch("node0", 0, "stdout", ((0, "line"),)))
    rec.checkpoint({0: 10})
    rec.close()
    (tmp_path / "run" / "rank-0.log").unlink()
    (tmp_path / "run" / "rank-0.log").symlink_to(victim)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        Recorder(tmp_path / "run", resume=True)  # it cuts rank-0.log back to its checkpoint
    assert victim.read_text() == "precious\n"


@pytest.mark.security
def test_a_planted_summary_tmp_is_not_written_through(tmp_path: Path, victim: Path) -> None:
    """The summary's tmp was `.summary.json.<pid>.tmp`: planted as a symlink, it overwrote
    another file. Its name is random now, and it is made exclusively."""
    rec = Recorder(tmp_path / "run")
    for pid in range(os.getpid() - 5, os.getpid() + 5):
        (tmp_path / "run" / f".summary.json.{pid}.tmp").symlink_to(victim)
    rec(RunStarted("r1", str(tmp_path / "run"), ("node0",), 1, "torchrun"))
    rec(RunFinished("succeeded", 0, 1.0))
    rec.close()
    assert victim.read_text() == "precious\n"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "succeeded"


@pytest.mark.security
def test_a_run_dir_others_may_write_is_not_recorded_in(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "run").chmod(0o777)
    with pytest.raises(RunDirError, match=r"run: others may write to it \(mode 0777\)"):
        Recorder(tmp_path / "run")
    assert not any((tmp_path / "run").iterdir())
    (tmp_path / "run").chmod(0o700)
    (tmp_path / "run" / "run.json").write_text('{"run_id": "r1"}')
    (tmp_path / "run").chmod(0o722)
    with pytest.raises(runs.RunError, match="others may write to it"):
        runs.resolve(str(tmp_path / "run"))  # an attach would act on its inventory copy


def test_the_summary_has_every_attempt_and_attach_finds_a_spares_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """job.restarts: summary.json's attempts; run.json's exclusions and replacements give an
    attach the run's hosts as they are now."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    text = (
        "hosts: [{host: a}, {host: b}, {host: x}, {host: 's[1-2]', spare: true}]\n"
        "job: {script: t.py}\n"
    )
    inv = inventory.without(inventory.parse(text, tmp_path / "inv.yaml"), "x")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    runs.register(run_dir, "r1", inv)
    runs.replaced(run_dir, 1, "s1", 2, "b")
    again = runs.read(run_dir).inventory()
    assert [(h.name, h.node_rank, h.since) for h in again.hosts] == [("a", 0, 0), ("s1", 1, 2)]
    assert [h.name for h in again.usable_spares] == ["s2"]
    rec = Recorder(run_dir / "logs")
    rec(RunStarted("r1", str(run_dir), ("a", "b"), 2, "torchrun"))
    lost = Failure("b", None, None, "b was lost", seen_at=3.0)
    attempts = (AttemptResult(0, 1.0, 3.0, "failed", lost), AttemptResult(1, 5.0, 9.0, "succeeded"))
    rec(RunFinished("succeeded", 0, 8.0, None, (), attempts))
    rec.close()
    summary = json.loads((run_dir / "logs" / "summary.json").read_text())
    assert summary["attempts"] == [
        {"attempt": 0, "started": 1.0, "finished": 3.0, "status": "failed",
         "failure": {**dataclasses.asdict(lost), "traceback": [], "evidence": []}},
        {"attempt": 1, "started": 5.0, "finished": 9.0, "status": "succeeded", "failure": None},
    ]  # fmt: skip
    event = RunFinished("succeeded", 0, 8.0, None, (), attempts)
    assert from_json(event.to_json()) == event
    restarting = RunRestarting(1, 3, "b was lost", 10.0, ("b",))
    assert from_json(restarting.to_json()) == restarting
    assert restarting.text() == (
        "restarting once a spare host takes b's place (in 10 s at the earliest): "
        "attempt 2 of 3 (after b was lost)"
    )


@pytest.mark.parametrize(
    ("left", "said"), [(0.499, "0.5"), (0.5, "0.5"), (0.04, "0"), (9.96, "10"), (59.998, "60")]
)
def test_a_restarts_wait_is_said_as_people_read_it(left: float, said: str) -> None:
    """The hub says the time left to a restart to the millisecond; a loaded host's 0.499 s is
    said as the 0.5 s the job asked for (a slow_e2e story failed on `restarting in 0.499 s`)."""
    text = RunRestarting(1, 3, "rank 3 failed on node1", left).text()
    assert text == f"restarting in {said} s: attempt 2 of 3 (after rank 3 failed on node1)"


def test_summary_hosts_are_the_same_live_or_after_an_attach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spare took node 1 from b at attempt 2: the launcher that saw it live began with the
    hosts of the launch, an attach with the spare in b's place. Both summaries say the hosts
    as the run ended and name the swap; a second swap of the same node follows the first."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    text = "hosts: [{host: a}, {host: b}, {host: 's[1-2]', spare: true}]\njob: {script: t.py}\n"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    runs.register(run_dir, "r1", inventory.parse(text, tmp_path / "inv.yaml"))
    runs.replaced(run_dir, 1, "s1", 1, "b")
    runs.replaced(run_dir, 1, "s2", 2, "s1")
    fin = RunFinished("succeeded", 0, 8.0)
    said = []
    for hosts, resume in ((("a", "b"), False), (("a", "s2"), True)):  # live, then an attach
        rec = Recorder(run_dir, resume=resume)
        rec(RunStarted("r1", str(run_dir), hosts, 2, "torchrun"))
        rec(fin)
        rec.close()
        summary = json.loads((run_dir / "summary.json").read_text())
        said.append((summary["hosts"], summary["replaced"]))
    assert said[0] == said[1] == (
        ["a", "s2"],
        [{"node": 1, "host": "b", "by": "s1", "attempt": 1},
         {"node": 1, "host": "s1", "by": "s2", "attempt": 2}],
    )  # fmt: skip


def test_a_spares_spool_is_read_from_its_first_byte(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "run")
    rec.checkpoint({0: 100, 1: 200})
    rec.close()
    again = Recorder(tmp_path / "run", resume=True)
    assert again.stored == {0: 100, 1: 200} and again.since == {0: 0, 1: 0}
    again.new_stream(1, 2)  # a spare in node 1's place from attempt 2: its own spool
    again.checkpoint({0: 150, 1: 40})
    again.close()
    nodes = json.loads((tmp_path / "run" / "offsets.json").read_text())
    assert (nodes["1"]["offset"], nodes["1"]["since"], nodes["0"]["offset"]) == (40, 2, 150)


def test_the_history_counts_attempts_and_names_a_run_waiting_for_a_spare(tmp_path: Path) -> None:
    from ddptui.tui.text import run_cells, run_row

    waiting = {"alive": True, "attempt": 0, "waiting": ["node1"], "status": "waiting"}
    status, detail = runs.judge({0: waiting, 1: None})
    assert status == "running" and detail.startswith("node1 lost: waiting for `ddptui attach`")
    record = runs.RunRecord(
        "r1", tmp_path, {"hosts": ["node0"]}, None, status, detail, {0: waiting}
    )
    assert run_row(record)["attempts"] == 1
    done = {"attempts": [{"attempt": 0}, {"attempt": 1}], "status": "succeeded"}
    record = runs.RunRecord("r2", tmp_path, {"hosts": ["node0"]}, done, "succeeded")
    assert run_row(record)["attempts"] == 2
    assert run_cells(run_row(record))[1] == "succeeded (2 attempts)"


def test_the_history_shows_the_last_step_and_loss(tmp_path: Path) -> None:
    from ddptui.tui.text import run_cells, run_row

    last = {"step": 1200, "total": 5000, "metrics": {"lr": 1e-4, "loss": 0.41}}
    link = {"tracker": "W&B", "name": None, "url": "https://wandb.ai/x", "rank": 0}
    done = {"status": "succeeded", "progress": last, "links": [link]}
    row = run_row(runs.RunRecord("r1", tmp_path, {"hosts": ["node0"]}, done, "succeeded"))
    assert row["progress"] == last and row["links"] == [link]
    assert run_cells(row)[-2] == "step 1200/5000 · loss 0.41"
    hub = {0: {"series": {"last": {"step": 7, "metrics": {}}}}}
    going = runs.RunRecord("r2", tmp_path, {"hosts": ["node0"]}, None, "running", states=hub)
    assert run_cells(run_row(going))[-2] == "step 7"


def test_the_history_says_why_a_run_ended_where_it_failed(tmp_path: Path) -> None:
    """The restarts' stop as summary.json's reason (node 0's hub said it), in `runs`."""
    from ddptui.tui.text import run_cells, run_row

    why = "no progress: it failed as the last attempt did, no further"
    failed = {"status": "failed", "reason": why, "attempts": [{}, {}]}
    record = runs.RunRecord("r1", tmp_path, {"hosts": ["node0"]}, failed, "failed", why)
    row = run_row(record)
    assert row["detail"] == why and run_cells(row)[-1] == why
    ok = runs.RunRecord("r2", tmp_path, {"hosts": ["node0"]}, {"status": "succeeded"}, "succeeded")
    assert run_cells(run_row(ok))[-1] == ""
