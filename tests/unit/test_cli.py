"""The command line: a user's mistake is one line and exit 2, never a traceback."""

from __future__ import annotations

import getpass
import io
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from apptools import FakeRuns, local_inventory, settle, two_node_script

import ddptui.tui.dashboard.app as app_module
from ddptui.remote.events import LogBatch
from ddptui.tui import cli
from ddptui.tui.dashboard.app import create_app
from ddptui.tui.headless.printer import Printer


def ddptui(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddptui.tui.cli", *args],
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


# -- every mistake is one line, exit 2, checked before anything connects -----------------------

REFUSED = "hosts:\n  - {host: 127.0.0.1, port: 1, name: refused}\njob: {script: t.py}\n"


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    """One host whose port refuses at once: a launch would fail in milliseconds, exit 3."""
    (tmp_path / "inv.yaml").write_text(REFUSED)
    return tmp_path / "inv.yaml"


def one_line_exit_2(res: subprocess.CompletedProcess[str], words: str) -> None:
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith("ddptui") and words in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "connect" not in res.stderr


def test_a_run_dir_holding_files_is_refused(inv: Path, tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "rank-0.log").write_text("the last run\n")
    res = ddptui("--headless", "launch", "-i", str(inv), "--run-dir", str(tmp_path / "old"))
    one_line_exit_2(res, f"--run-dir {tmp_path / 'old'}: not empty")
    assert sorted(p.name for p in (tmp_path / "old").iterdir()) == ["rank-0.log"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--headless", "launch", "--run-dir", "{file}"], "--run-dir {file}: not a directory"),
        (["--headless", "launch", "--run-dir", "{file}/run"], "not a directory"),
        (["--headless", "launch", "--runs-root", "{file}"], "runs root {file}: not a directory"),
        (["launch", "--run-dir", "{tmp}/r"], "--run-dir is one run's directory"),
        (["launch", "--skip-checks"], "--skip-checks needs --headless"),
        (["launch", "--exclude", "refused"], "--exclude needs --headless"),
        (["--headless", "check", "--exclude", "nodeX"], "--exclude: no host 'nodeX'"),
        (["--headless", "launch", "--exclude", "refused"], "--exclude leaves no host to run on"),
        (["--headless", "launch", "--run-dir", "{tmp}/a", "--runs-root", "{tmp}"], "give one"),
        (["--headless", "check", "--", "x"], "check takes no script arguments"),
        (["--headless", "launch", "--bogus"], "unrecognized arguments: --bogus"),
        (["--headless", "launch", "--wait", "soon"], "--wait soon: give a time above 0"),
        (["--headless", "launch", "--wait", "0"], "--wait 0: give a time above 0"),
        (["launch", "--wait"], "--wait needs --headless"),
        (["who", "--", "x"], "who takes no script arguments"),
        (["lunch"], "invalid choice: 'lunch'"),
    ],
)
def test_usage_mistakes(inv: Path, tmp_path: Path, args: list[str], words: str) -> None:
    (tmp_path / "file").write_text("")
    fill = {"file": str(tmp_path / "file"), "tmp": str(tmp_path)}
    res = ddptui(*[a.format(**fill) for a in args], "-i", str(inv))
    one_line_exit_2(res, words.format(**fill))


def test_check_and_launch_agree_on_an_unreachable_host(inv: Path, tmp_path: Path) -> None:
    check = ddptui("--headless", "check", "-i", str(inv))
    launch = ddptui("--headless", "launch", "-i", str(inv), "--run-dir", str(tmp_path / "run"))
    assert (check.returncode, launch.returncode) == (3, 3), (check.stderr, launch.stderr)
    user = f"{getpass.getuser()}@"  # the login ssh would use, as OpenSSH resolved it
    assert f"connection refused by {user}127.0.0.1:1" in check.stdout
    assert f"refused: unreachable (connection refused by {user}127.0.0.1:1" in launch.stderr


def test_help_imports_nothing_heavy() -> None:
    """`ddptui --help` in ~20 ms over python itself, not 0.44 s: only argparse at import time
    (scripts/bench_help.py times it; this names what must not load)."""
    for args in (["--help"], ["launch", "--help"], ["--bogus"]):
        res = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "ddptui.tui.cli", *args],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parents[2],
        )
        loaded = {line.split("|")[-1].strip() for line in res.stderr.splitlines()}
        heavy = {
            "pydantic",
            "yaml",
            "asyncssh",
            "textual",
            "rich",
            "platformdirs",
            "ddptui.remote.run",
        }
        assert loaded and not heavy & loaded, heavy & loaded


# -- commands open the dashboard on them --------------------------------------------------------


class OpenedApp:
    opened: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, path: Path, **kw: Any) -> None:
        self.opened.append({"path": path, **kw})

    def run(self) -> int:
        return 0


@pytest.mark.parametrize(
    ("args", "start", "extra"),
    [
        ([], None, []),
        (["launch", "--", "--epochs", "3"], "launch", ["--epochs", "3"]),
        (["check"], "check", []),
    ],
)
def test_each_command_opens_the_dashboard_on_it(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    args: list[str],
    start: str | None,
    extra: list[str],
) -> None:
    monkeypatch.setattr(app_module, "create_app", OpenedApp)
    OpenedApp.opened.clear()
    assert (
        cli.main([*args[:1], "-i", "x.yaml", "--runs-root", str(tmp_path / "runs"), *args[1:]]) == 0
    )
    assert OpenedApp.opened == [
        {"path": Path("x.yaml"), "runs_dir": tmp_path / "runs", "extra_args": extra, "start": start}
    ]
    assert stat.S_IMODE((tmp_path / "runs").stat().st_mode) == 0o700


async def test_dashboard_opened_on_launch_launches_at_once(tmp_path: Path) -> None:
    inv = local_inventory(tmp_path, ["--epochs", "1"])
    for start, launched in (("launch", 1), ("check", 0), (None, 0)):
        runs = FakeRuns(two_node_script)
        app = create_app(inv, run_factory=runs, start=start)
        async with app.run_test() as pilot:
            await settle(pilot)
            assert len(runs.runs) == launched, start


# -- the headless printer ------------------------------------------------------------------------


def console(encoding: str = "utf-8") -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding=encoding, write_through=True)


def written(stream: io.TextIOWrapper) -> bytes:
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue()


def test_printer_writes_back_the_bytes_ranks_wrote() -> None:
    raw = b"caf\xc3\xa9 \xff\xfe \x1b[31mred\x1b[0m"
    out, err, ascii_out = console(), console(), console("ascii")
    batch = LogBatch("node0", 0, "stdout", ((0, raw.decode("utf-8", "surrogateescape")),))
    Printer(out, err)(batch)
    assert written(out) == b"[r0 node0] " + raw + b"\n"
    Printer(ascii_out, err)(LogBatch("node0", 0, "stdout", ((1, "日本 \udcff"),)))
    assert written(ascii_out) == b"[r1 node0] \\u65e5\\u672c \xff\n"  # never UnicodeEncodeError


class Gone(io.StringIO):
    """An output whose reader left (`| head` exited)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_output_stops_the_run_once_and_is_not_written_again() -> None:
    calls: list[str] = []
    err = io.StringIO()
    printer = Printer(Gone(), err, on_closed=lambda: calls.append("stop"))
    for i in range(3):
        printer(LogBatch("node0", 0, "stdout", ((0, f"line {i}"),)))
    printer(LogBatch("node0", 0, "stderr", ((0, "still here"),)))
    assert calls == ["stop"]
    assert err.getvalue() == "[r0 node0] still here\n"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["attach"], "the following arguments are required: RUN"),
        (["stop", "nope-no-such-run"], "no run matches 'nope-no-such-run'"),
        (["attach", "nope-no-such-run", "--tail", "x"], "argument --tail: invalid int value"),
        (["--headless", "runs", "--", "x"], "runs takes no script arguments"),
        (["launch", "--detach"], "--detach needs --headless"),
    ],
)
def test_run_commands_mistakes(tmp_path: Path, args: list[str], words: str) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "ddptui.tui.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_DATA_HOME": str(tmp_path)},  # no runs yet
    )
    one_line_exit_2(res, words)


def test_runs_lists_nothing_yet(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path)}
    for args in (["--headless", "runs"], ["runs", "--json"]):
        res = subprocess.run(
            [sys.executable, "-m", "ddptui.tui.cli", *args], capture_output=True, text=True, env=env
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout.endswith(("no runs yet\n", '"runs": []\n}\n')), res.stdout


def test_open_files_limit_goes_up_to_the_hard_one() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        cli.raise_open_files_limit()
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


NOBODY = 65534  # another user's uid (chown needs root)


@pytest.mark.security
@pytest.mark.parametrize(
    ("flag", "owner", "mode", "words"),
    [
        ("--run-dir", NOBODY, 0o700, "owned by nobody (uid 65534), not by you"),
        ("--run-dir", None, 0o770, "others may write to it (mode 0770)"),
        ("--run-dir", None, 0o1777, "others may write to it (mode 1777)"),
        ("--runs-root", NOBODY, 0o755, "owned by nobody (uid 65534), not by you"),
        ("--runs-root", None, 0o777, "others may write to it (mode 0777)"),
    ],
)
def test_a_run_dir_another_user_controls_is_refused_before_connecting(
    inv: Path, tmp_path: Path, flag: str, owner: int | None, mode: int, words: str
) -> None:
    """Who may write a run dir may plant a symlink where a log or the summary goes (issue 19,
    item 4): refused at once, naming the directory and why, and nothing is written in it."""
    if owner is not None and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    theirs.chmod(mode)
    if owner is not None:
        os.chown(theirs, owner, owner)
    res = ddptui("--headless", "launch", "-i", str(inv), flag, str(theirs))
    one_line_exit_2(res, f"{theirs}: {words}")
    assert not any(theirs.iterdir())


def test_wait_limits() -> None:
    assert cli._wait_seconds(None) is None
    assert cli._wait_seconds("inf") == float("inf")  # --wait alone
    assert [cli._wait_seconds(t) for t in ("90", "30s", "10m", "2h", "1d")] == [
        90, 30, 600, 7200, 86400,
    ]  # fmt: skip
    assert "75   launch: its GPUs are held by another run" in cli.EPILOG


def test_wait_is_refused_for_a_job_handed_to_slurm(tmp_path: Path) -> None:
    """Slurm's queue holds a handed job (sbatch): --wait would be ignored, so it is refused."""
    slurm = tmp_path / "slurm.yaml"
    slurm.write_text("slurm: {login: hpc-login, nodes: 2}\njob: {script: train.py}\n")
    res = ddptui("--headless", "launch", "-i", str(slurm), "--wait", "10m")
    one_line_exit_2(res, "--wait: ")
    assert "hands the job to Slurm (slurm:), whose queue it waits in" in res.stderr
