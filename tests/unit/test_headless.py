"""The headless printer at scale: a few lines for 128 hosts, the exceptions named, a live line
on a terminal, and a rank's escape sequences kept from the terminal (but not from the logs)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import pty
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest
import yaml

from ddptui.remote.events import (
    CheckpointSaved,
    ChecksDone,
    CodeSynced,
    Event,
    Failure,
    Finding,
    HostState,
    LogBatch,
    NodeExited,
    NodeStarted,
    Notice,
    RunFinished,
    RunStarted,
    Stopping,
)
from ddptui.remote.inventory import Host
from ddptui.tui.headless import printer as printer_module
from ddptui.tui.headless.console import terminal_safe
from ddptui.tui.headless.findings import finding_lines
from ddptui.tui.headless.printer import Printer

REPO = Path(__file__).resolve().parents[2]
N = 128
NAMES = [f"gpu{k + 1:03d}" for k in range(N)]
ADDRS = [f"10.79.0.{k + 11}" for k in range(N)]
PY_SPY = "py-spy not found beside the job's python: stacks need it (pip install py-spy)"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def hosts() -> list[Host]:
    return [
        Host(k, a, n, "ssh", "root", 22, None, None, "python3", "~/p", {}, None)
        for k, (n, a) in enumerate(zip(NAMES, ADDRS, strict=True))
    ]


def launch(clock: Clock, slow: dict[str, float] | None = None) -> Iterable[Event]:
    """A good 128-host launch, as the engine tells it; `slow`: a host's login time."""
    slow = slow or {}
    yield RunStarted("r1", "/runs/r1", tuple(NAMES), 8 * N, "torchrun")
    for k, name in enumerate(NAMES):
        yield HostState(name, k, "connecting")
    for k, name in sorted(enumerate(NAMES), key=lambda kn: slow.get(kn[1], 0.0)):
        clock.now = max(clock.now, slow.get(name, 1.0 + k / 100))
        yield HostState(name, k, "connected", f"{clock.now:.2f} s")
    yield ChecksDone(True, tuple(Finding("warning", "py-spy", PY_SPY, name) for name in NAMES))
    for k, name in enumerate(NAMES):
        yield HostState(name, k, "starting")
    for k, name in enumerate(NAMES):
        clock.now += 0.01
        yield HostState(name, k, "connected")  # the agent said hello
        yield NodeStarted(name, k, 1000 + k, name, tuple(range(8 * k, 8 * k + 8)))
        yield HostState(name, k, "running", f"ranks {8 * k}-{8 * k + 7}")
    for k, name in enumerate(NAMES):
        yield LogBatch(name, k, "stdout", ((8 * k, "epoch 0: loss 0.41"),))
    for k, name in enumerate(NAMES):
        yield HostState(name, k, "done")
        yield NodeExited(name, k, 0)
    yield RunFinished("succeeded", 0, 63.0)


def play(events: Iterable[Event], **kw: object) -> tuple[list[str], str]:
    """ddptui's own lines (stderr), and stdout."""
    out, err = io.StringIO(), io.StringIO()
    printer = Printer(out, err, **kw)  # type: ignore[arg-type]
    for event in events:
        printer(event)
    return [ln for ln in err.getvalue().splitlines() if ln.startswith("ddptui: ")], out.getvalue()


def test_a_good_128_host_launch_says_a_few_lines() -> None:
    clock = Clock()
    said, out = play(launch(clock, {"gpu088": 9.0}), hosts=hosts(), clock=clock)
    assert len(said) <= 25, said
    assert said == [
        "ddptui: run r1: 128 hosts, world size 1024; logs in /runs/r1",
        "ddptui: connected to 128 hosts in 9.0 s; slowest gpu088 9.0 s",
        "ddptui: slow connecting: gpu088 9.0 s (median 1.6 s)",
        f"ddptui: warn gpu[001-128] py-spy: {PY_SPY}",
        "ddptui: checks passed: 0 failures, 128 warnings",
        "ddptui: started on 128 hosts in 1.3 s; slowest gpu128 1.3 s",
        "ddptui: running: ranks 0-1023 on gpu[001-128]",
        "ddptui: run succeeded in 63.0 s (exit 0)",
    ]
    assert out.count("\n") == N and "[r1016 gpu128] epoch 0: loss 0.41\n" in out


def test_verbose_gives_every_hosts_own_lines() -> None:
    clock = Clock()
    said, _ = play(launch(clock), hosts=hosts(), clock=clock, verbose=True)
    assert "ddptui: gpu088: connected (1.87 s)" in said
    assert f"ddptui: warn gpu088 py-spy: {PY_SPY}" in said
    assert "ddptui: gpu088: running (ranks 696-703)" in said and "ddptui: gpu001: done" in said
    assert len(said) > 5 * N


def test_the_same_trouble_on_every_host_is_one_line() -> None:
    """An unknown host key everywhere: the reason names each host's address; one line."""
    clock = Clock()
    events: list[Event] = [RunStarted("r1", "/runs/r1", tuple(NAMES), None, "torchrun")]
    events += [HostState(name, k, "connecting") for k, name in enumerate(NAMES)]
    events += [
        HostState(name, k, "unreachable", f"host key not verified for root@{addr}:22 (unknown)")
        for k, (name, addr) in enumerate(zip(NAMES, ADDRS, strict=True))
    ]
    events += [Notice("error", "not starting: every host must be reachable")]
    events += [RunFinished("unreachable", 3, 1.0)]
    said, _ = play(events, hosts=hosts(), clock=clock)
    assert said[1:] == [
        "ddptui: gpu[001-128]: unreachable (host key not verified for "
        "root@10.79.0.[11-138]:22 (unknown))",
        "ddptui: error: not starting: every host must be reachable",
        "ddptui: run unreachable in 1.0 s (exit 3)",
    ]


def test_a_failed_host_and_a_slow_one_are_named() -> None:
    clock = Clock()

    def events() -> Iterable[Event]:
        yield RunStarted("r1", "/runs/r1", tuple(f"a{k}" for k in range(1, 7)), 6, "torchrun")
        yield from (HostState(f"a{k}", k, "connecting") for k in range(1, 7))
        for k, at in ((1, 0.2), (2, 0.3), (4, 0.25), (5, 0.3), (6, 4.1)):
            clock.now = at
            yield HostState(f"a{k}", k, "connected")
        clock.now = 10.0
        yield HostState("a3", 3, "unreachable", "timed out connecting to a3:22 after 10 s")

    said, _ = play(events(), clock=clock)
    assert said[1:] == [
        "ddptui: connected to 5 hosts in 10.0 s; slowest a6 4.1 s",
        "ddptui: slow connecting: a6 4.1 s (median 0.3 s)",
        "ddptui: a3: unreachable (timed out connecting to a3:22 after 10 s)",
    ]


async def test_a_phase_the_engine_adds_is_folded_the_same_way() -> None:
    """A restart (say) on every host: a phase like any other, its end one line."""
    clock = Clock()

    def events() -> Iterable[Event]:
        yield RunStarted("r1", "/runs/r1", ("a1", "a2", "a3"), 3, "torchrun")
        yield from (HostState(f"a{k}", k, "running") for k in (1, 2, 3))
        yield from (HostState(f"a{k}", k, "restarting", "attempt 2") for k in (1, 2, 3))
        for k in (1, 2, 3):
            clock.now += 1.0
            yield HostState(f"a{k}", k, "running")

    said, _ = play(events(), clock=clock)
    assert said[1:] == [
        "ddptui: running: a[1-3]",
        "ddptui: restarting done on 3 hosts in 3.0 s; slowest a3 3.0 s",
        "ddptui: running: a[1-3]",
    ]


def test_a_host_entering_a_phase_again_is_inside_it_again() -> None:
    """Reconnects that keep failing (a node Slurm is about to fail): a host back in
    `starting` after it went through it once holds the phase open, and never breaks it."""
    clock = Clock()

    def events() -> Iterable[Event]:
        yield RunStarted("r1", "/runs/r1", ("a1", "a2"), 2, "torchrun")
        yield from (HostState(f"a{k}", k, "running") for k in (1, 2))
        for _ in range(3):
            for k in (2, 1):
                clock.now += 1.0
                yield HostState(f"a{k}", k, "connecting")
                yield HostState(f"a{k}", k, "starting")
        yield from (HostState(f"a{k}", k, "running") for k in (1, 2))

    said, _ = play(events(), clock=clock)
    assert said[-1] == "ddptui: running: a[1-2]"


def test_an_attach_names_the_spare_in_a_lost_hosts_place() -> None:
    """The run dir's copy says a1, a2; a hot spare a3 took node 1 with nobody attached: the
    attach's hosts are a1 and a3, and a phase ends without a2."""
    clock = Clock()
    copy = [Host(k, f"10.0.0.{k}", f"a{k + 1}", "ssh", "root", 22, None, None, "python3", "~/p",
                 {}, None) for k in range(2)]  # fmt: skip

    def events() -> Iterable[Event]:
        yield RunStarted("r1", "/runs/r1", ("a1", "a3"), 2, "torchrun")
        yield from (HostState(name, k, "connecting") for k, name in enumerate(("a1", "a3")))
        for k, name in enumerate(("a1", "a3")):
            clock.now += 1.0
            yield HostState(name, k, "connected", "1.00 s")

    said, _ = play(events(), clock=clock, hosts=copy)
    assert said == [
        "ddptui: run r1: 2 hosts, world size 2; logs in /runs/r1",
        "ddptui: connected to 2 hosts in 2.0 s; slowest a3 2.0 s",
    ]


async def test_words_from_many_hosts_wait_a_moment_to_be_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(printer_module, "HOLD_S", 0.0)
    err = io.StringIO()
    printer = Printer(io.StringIO(), err, hosts=hosts())
    for name in NAMES:
        printer(Notice("warning", "connection lost; reconnecting", host=name))
    assert err.getvalue() == ""  # held until the moment passes
    while not err.getvalue():
        await asyncio.sleep(0)
    assert err.getvalue() == "ddptui: gpu[001-128]: warning: connection lost; reconnecting\n"


def test_code_syncs_are_said_once_every_host_pushed() -> None:
    err = io.StringIO()
    printer = Printer(io.StringIO(), err, hosts=hosts())
    for k, name in enumerate(NAMES):
        assert err.getvalue() == ""
        printer(CodeSynced(name, k, "~/proj", files=3, bytes=41200, unchanged=197, seconds=k / N))
    assert err.getvalue() == (
        "ddptui: gpu[001-128]: code synced to ~/proj: 3 files (41.2 kB) pushed, 197 unchanged, "
        "0.00-0.99 s\n"
    )


def test_a_failed_run_ends_with_its_report_and_no_echo_of_the_others() -> None:
    tb = ("Traceback (most recent call last):", "RuntimeError: rank 4 failed")
    failure = Failure("a2", 4, 1, "RuntimeError: rank 4 failed", traceback=tb)
    events: list[Event] = [RunStarted("r1", "/runs/r1", ("a1", "a2"), 4, "torchrun")]
    events += [HostState("a1", 0, "running"), HostState("a2", 1, "running")]
    events += [HostState("a2", 1, "failed", failure.message)]
    events += [HostState("a1", 0, "stopped", "killed by SIGTERM")]
    events += [RunFinished("failed", 1, 5.0, failure, (failure,))]
    out, err = io.StringIO(), io.StringIO()
    printer = Printer(out, err)
    for event in events:
        printer(event)
    assert err.getvalue().splitlines()[2:] == [
        "ddptui: a2: failed (RuntimeError: rank 4 failed)",
        "ddptui: run failed: rank 4 on a2 (exit code 1): RuntimeError: rank 4 failed",
        "    Traceback (most recent call last):",
        "    RuntimeError: rank 4 failed",
    ]


def test_a_restart_chain_that_stops_says_why_after_the_failure() -> None:
    failure = Failure("a2", 3, 3, "exit 3")
    why = "no progress: it failed as the last attempt did, no further"
    err = io.StringIO()
    Printer(io.StringIO(), err)(RunFinished("failed", 1, 5.0, failure, (failure,), reason=why))
    assert err.getvalue().splitlines() == [
        "ddptui: run failed: rank 3 on a2 (exit code 3): exit 3",
        f"ddptui: not restarted: {why}",
    ]


def test_a_stop_says_the_ranks_time_to_save_and_the_checkpoint_saved_on_the_way_out() -> None:
    err = io.StringIO()
    printer = Printer(io.StringIO(), err)
    printer(Stopping(30, "ckpt"))
    printer(CheckpointSaved("/work/ckpt/step_17.pt", 17, time.time()))
    stop, saved = err.getvalue().splitlines()
    assert stop == (
        "ddptui: stopping every node: TERM sent; the ranks have 30 s (job.stop_grace) to finish "
        "saving to ckpt, then KILL"
    )
    assert saved.startswith("ddptui: checkpoint: step 17, saved ")
    assert saved.endswith(" ago (/work/ckpt/step_17.pt)")
    err = io.StringIO()
    Printer(io.StringIO(), err)(Stopping(5, None))  # no job.checkpoint
    assert err.getvalue() == "ddptui: stopping every node (TERM, then KILL after 5 s)\n"


def test_on_a_terminal_a_live_line_per_phase() -> None:
    err = Terminal()
    printer = Printer(io.StringIO(), err, clock=Clock())
    printer(RunStarted("r1", "/runs/r1", tuple(NAMES), None, "torchrun"))
    for k, name in enumerate(NAMES):
        printer(HostState(name, k, "connecting"))
    for k, name in enumerate(NAMES[:97]):
        printer(HostState(name, k, "connected"))
    assert err.getvalue().endswith("\r\x1b[2Kconnecting 97/128 …")
    printer(Notice("info", "something to say meanwhile"))
    assert err.getvalue().endswith(  # above the live line, which is drawn again
        "\r\x1b[2Kddptui: something to say meanwhile\nconnecting 97/128 …"
    )
    for k, name in enumerate(NAMES[97:], 97):
        printer(HostState(name, k, "connected"))
    assert err.getvalue().endswith(  # the live line gone, the phase's line in its place
        "connecting 127/128 …\r\x1b[2Kddptui: connected to 128 hosts in 0.0 s; "
        "slowest gpu001 0.0 s\n"
    )


def test_findings_fold_by_check_and_message() -> None:
    found = [Finding("warning", "py-spy", PY_SPY, name) for name in NAMES]
    found += [Finding("failure", "gpu", "nvidia-smi failed (exit 9)", "gpu003")]
    found += [Finding("warning", "same-torch", "torch differs across hosts")]
    assert finding_lines(found) == [
        "FAIL gpu003 gpu: nvidia-smi failed (exit 9)",
        f"warn gpu[001-128] py-spy: {PY_SPY}",
        "warn same-torch: torch differs across hosts",
    ]


# -- a rank's escape sequences (issue 19, item 9) ------------------------------------------------

HOSTILE = (
    "\x1b]52;c;cm0gLXJmIH4=\x07clipboard \x1b]0;pwned\x1b\\title \x1b[2J\x1b[Hclear "
    "\x1bPdcs\x1b\\ \x1b_apc\x1b\\ \x1bcreset \x9b2J\x07bell \x1b[31mred\x1b[0m\ttab"
)
SAFE = "clipboard title clear   reset bell \x1b[31mred\x1b[0m\ttab"


@pytest.mark.security
def test_terminal_safe_keeps_colours_and_drops_every_other_control() -> None:
    assert terminal_safe(HOSTILE) == SAFE
    assert terminal_safe("progress 10%\rprogress 20%") == "progress 10%\rprogress 20%"
    assert terminal_safe("open \x1b]8;;http://x\x07 to the end") == "open  to the end"


@pytest.mark.security
def test_rank_text_is_made_safe_on_a_terminal_and_ddptuis_words_everywhere() -> None:
    batch = LogBatch("n\x1b]0;t\x07", 0, "stdout", ((0, HOSTILE),))
    tty, pipe = Terminal(), io.StringIO()
    Printer(tty, Terminal())(batch)
    Printer(pipe, io.StringIO())(batch)
    assert tty.getvalue() == f"[r0 n] {SAFE}\n"
    assert pipe.getvalue() == f"[r0 n\x1b]0;t\x07] {HOSTILE}\n"  # a pipe or a file: as written
    plain = "clipboard title clear   reset bell red\ttab"  # ddptui's words: no escape at all
    for err in (Terminal(), io.StringIO()):  # a terminal, or a pipe
        Printer(io.StringIO(), err)(Notice("error", HOSTILE, host="n1"))
        assert err.getvalue() == f"ddptui: n1: error: {plain}\n"


@pytest.mark.security
def test_a_launch_on_a_terminal_strips_what_its_log_keeps(tmp_path: Path) -> None:
    """The real command under a pseudo-terminal: the terminal gets the safe text, rank-0.log
    the bytes the rank wrote."""
    script = tmp_path / "hostile.py"
    script.write_text(f"import sys\nsys.stdout.write({HOSTILE!r} + '\\n')\n")
    inv = tmp_path / "inventory.yaml"
    inv.write_text(
        yaml.safe_dump(
            {
                "defaults": {"transport": "local", "python": sys.executable},
                "hosts": [{"host": "localhost", "name": "node0"}],
                "job": {"script": str(script), "launcher": "env", "nproc_per_node": 1},
            }
        )
    )
    run_dir = tmp_path / "run"
    cli = [sys.executable, "-m", "ddptui.tui.cli", "--headless", "launch", "-i", str(inv)]
    shown = _on_a_terminal([*cli, "--skip-checks", "--run-dir", str(run_dir)])
    assert f"[node0] {SAFE}".encode() in shown, shown
    assert b"\x1b]52" not in shown and b"\x1b[2J" not in shown and b"\x1bc" not in shown
    log = (run_dir / "node-0.log").read_bytes()
    assert log == (HOSTILE + "\n").encode()


@pytest.mark.security
def test_runs_and_plot_on_a_terminal_show_no_escape_of_a_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose summary and curve carry a rank's OSC 52, OSC 0 and C1 controls (a metric's
    name, the failing host's, a tracker's link): `runs` and `plot` under a pseudo-terminal print
    none of them (they came out raw)."""
    env_home = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(env_home))
    from ddptui.remote.store import runs

    run_dir = runs.root() / "20250102-080000-beef"
    run_dir.mkdir(parents=True)
    info = {"run_id": run_dir.name, "hosts": ["node0"], "started_at": 1.7e9}
    (run_dir / "run.json").write_text(json.dumps(info))
    metric = "loss\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;pwned\x07\x9b2J"
    progress = {"step": 3, "total": 9, "metrics": {metric: 0.5}}
    summary = {"status": "failed", "exit_code": 1, "elapsed": 1.0, "failing_rank": 0,
               "failing_host": "node0\x1b]52;c;aGk=\x07", "progress": progress,
               "links": [{"tracker": "W&B", "url": "https://w.ai/\x1b]52;c;aGk=\x07"}]}  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary))
    series = {"metrics": {metric: [[1, 1.0, 0], [3, 0.5, 0]]}, "attempts": [], "last": progress}
    (run_dir / "series.json").write_text(json.dumps(series))
    cli = [sys.executable, "-m", "ddptui.tui.cli", "--headless"]
    for argv in (["runs"], ["plot", run_dir.name]):
        shown = _on_a_terminal([*cli, *argv])
        assert b"loss" in shown, shown
        assert not any(c in shown for c in (b"\x1b]", b"\x07", b"\xc2\x9b", b"\x1b[2J")), shown


def _on_a_terminal(argv: Sequence[str]) -> bytes:
    main, sub = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sub, stderr=sub, cwd=REPO)
    os.close(sub)
    shown = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the command ended, its terminal closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    assert proc.wait(timeout=60) == 0, shown
    return shown


def test_training_progress_live_on_a_terminal_and_once_a_minute_in_a_pipe() -> None:
    from ddptui.remote.events import Progress, TrackerLink

    def news(step: int) -> Progress:
        return Progress(step, 5000, 7.2, (5000 - step) / 7.2, {"loss": 0.41})

    err, clock = Terminal(), Clock()
    printer = Printer(io.StringIO(), err, clock=clock)
    printer(news(1200))
    assert err.getvalue().endswith("\r\x1b[2Kstep 1200/5000 · 7.2 it/s · loss 0.41 · 9 min left")
    for quiet, want in ((False, 2), (True, 0)):
        pipe, clock = io.StringIO(), Clock()
        printer = Printer(io.StringIO(), pipe, clock=clock, quiet=quiet)
        for t in range(0, 120, 5):  # every 5 s for 2 min: a line at 0 s and at 60 s
            clock.now = float(t)
            printer(news(1200 + t))
        printer(TrackerLink("W&B", "https://wandb.ai/t/p/runs/x", "fancy-sun-1", 0))
        lines = pipe.getvalue().splitlines()
        assert sum(line.startswith("ddptui: step ") for line in lines) == want
        assert lines[-1] == "ddptui: W&B (fancy-sun-1): https://wandb.ai/t/p/runs/x"
