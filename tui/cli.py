"""The `ddptui` command. Each command opens the dashboard on it, or with --headless prints and
exits with a status; each is one small function below.

Only argparse is imported up front: `ddptui --help` must not wait for pydantic, asyncssh or
Textual (scripts/bench_help.py measures it).
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ddptui.remote.exits import EXIT_INTERRUPTED, EXIT_USAGE

USAGE = """\
ddptui [--headless [--verbose]] [-i INVENTORY] [--runs-root DIR] [COMMAND]
       ddptui [--headless] launch [--run-dir DIR] [--skip-checks] [--[no-]sync] [--detach]
                                  [--wait [LIMIT]] [--exclude HOSTS] [-- SCRIPT ARGS...]
       ddptui [--headless] check [--json] [--exclude HOSTS]
       ddptui who [--json]
       ddptui attach RUN [--tail N] [--quiet] | stop RUN | runs [--json]
       ddptui plot RUN [METRIC]
       ddptui stacks RUN [--json] [--native]
       ddptui serve [RUN] [--host ADDR] [--port N] [--control]
       ddptui export slurm
       ddptui init [PATTERN|HOST ...] | ssh HOST|NODE|rN | schema | completion SHELL"""
DESCRIPTION = """\
Launch multi-node PyTorch training over SSH and watch every rank.

launch and check open the dashboard on them (no command: the dashboard alone); with --headless
they print to the terminal instead and exit with a status. attach, stop and runs print (the
dashboard's views of them are to come). RUN is a run id, a unique prefix of one, or a run dir."""

EPILOG = """\
exit status:
  0    every rank succeeded; check: nothing failed (warnings allowed)
  1    a rank failed; check: a check failed; launch: failed checks refused it
  2    bad usage, a mistake in the inventory (file:line named), an unusable run directory
  3    a host could not be reached or logged into (launch and check): nothing was started
  75   launch: its GPUs are held by another run (or busy), named: nothing was started
       (--wait queues for them instead)
  130  interrupted (Ctrl-C, SIGTERM, SIGHUP, or the output closed, e.g. `| head`):
       every host's part of the job was stopped, summary.json written"""

if TYPE_CHECKING:
    from ddptui.remote.inventory import Inventory

Command = Callable[[argparse.Namespace, list[str]], int]
SHELLS = ("bash", "zsh", "fish")
EXPORTS = ("slurm",)
INIT_HOSTS = (
    "~/.ssh/config's hosts, patterns ('gpu-*') or names, or any host ssh reaches "
    "(default: every host the config names)"
)
SSH_TARGET = "a host's name or address, a node rank, or rN: the host of global rank N"


class UsageError(Exception):
    """A mistake on the command line or with a directory: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, not the whole usage: the mistake and where to look."""
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="ddptui",
        usage=USAGE,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(p)
    p.set_defaults(handler=dashboard, command=None)
    sub = p.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)
    launch_p = _command(sub, "launch", launch_command, "start the job on every host")
    launch_p.add_argument(
        "--run-dir",
        type=Path,
        metavar="DIR",
        help="--headless: this run's own directory, new or empty (default: RUNS_ROOT/<run id>)",
    )
    launch_p.add_argument("--skip-checks", action="store_true", help="do not check hosts first")
    launch_p.add_argument(
        "--sync",
        action=argparse.BooleanOptionalAction,
        help="--headless: push the code to every host first, or not (default: job.sync)",
    )
    launch_p.add_argument(
        "--detach", action="store_true", help="--headless: print the run id, leave it running"
    )
    launch_p.add_argument(
        "--wait",
        nargs="?",
        const="inf",
        metavar="LIMIT",
        help="--headless: if its GPUs are held, wait in the queue for them (at most LIMIT: "
        "90, 30s, 10m, 2h; default: no limit) instead of being refused",
    )
    _quiet(launch_p)
    _exclude(launch_p)
    _deep(launch_p, "--headless: the deep check first; its failures refuse the launch")
    check_p = _command(sub, "check", check_command, "check every host: nothing starts")
    check_p.add_argument("--json", action="store_true", help="print the facts as JSON (headless)")
    _exclude(check_p)
    _deep(check_p, "the fabric measured too: all-reduce, every host's links, every GPU")
    who_p = _command(sub, "who", who_command, "every host's GPUs: free, held by whom, or busy")
    who_p.add_argument("--json", action="store_true", help="print them as JSON")
    attach_p = _command(sub, "attach", attach_command, "replay and follow a run (Ctrl-C detaches)")
    attach_p.add_argument("run", metavar="RUN", help="a run id, a unique prefix, or a run dir")
    attach_p.add_argument("--tail", type=int, metavar="N", help="replay only the last N lines")
    _quiet(attach_p)
    stop_p = _command(
        sub, "stop", stop_command, "stop a run on every host, and prove nothing is left"
    )
    stop_p.add_argument("run", metavar="RUN", help="a run id, a unique prefix, or a run dir")
    runs_p = _command(sub, "runs", runs_command, "every run, newest first, with its status")
    runs_p.add_argument("--json", action="store_true", help="print them as JSON")
    plot_p = _command(sub, "plot", plot_command, "a metric's curve over the steps, in the terminal")
    plot_p.add_argument("run", metavar="RUN", help="a run id, a unique prefix, or a run dir")
    plot_p.add_argument("metric", metavar="METRIC", nargs="?", help="default: loss")
    stacks_p = _command(
        sub, "stacks", stacks_command, "every rank's Python stack, grouped (py-spy)"
    )
    stacks_p.add_argument("run", metavar="RUN", help="a run id, a unique prefix, or a run dir")
    stacks_p.add_argument("--json", action="store_true", help="print them as JSON")
    stacks_p.add_argument("--native", action="store_true", help="C/C++ frames too (py-spy)")
    serve_p = _command(
        sub, "serve", serve_command, "the dashboard in a browser (a URL with a token)"
    )
    serve_p.add_argument("run", metavar="RUN", nargs="?", help="open on this run (attach)")
    serve_p.add_argument(
        "--host",
        default="127.0.0.1",
        metavar="ADDR",
        help="the address to listen on (default 127.0.0.1: reach it over ssh -L)",
    )
    serve_p.add_argument("--port", type=int, default=8000, help="default 8000")
    serve_p.add_argument(
        "--control", action="store_true", help="allow launch, stop and restart (default: watch)"
    )
    init_p = _command(
        sub, "init", init_command, "write an inventory from ~/.ssh/config, then check it"
    )
    init_p.add_argument("hosts", nargs="*", metavar="PATTERN|HOST", help=INIT_HOSTS)
    init_p.add_argument("--script", default="train.py", help="the job's script (train.py)")
    init_p.add_argument("--workdir", metavar="DIR", help="the job's dir (default: this one's)")
    init_p.add_argument("--no-check", action="store_true", help="write it, check nothing")
    init_p.add_argument("--force", action="store_true", help="overwrite an existing inventory")
    ssh_p = _command(
        sub, "ssh", ssh_command, "a shell on a host, in the job's workdir (OpenSSH's ssh)"
    )
    ssh_p.add_argument("target", metavar="HOST|NODE|rN", help=SSH_TARGET)
    ssh_p.add_argument("--run", metavar="RUN", help="rN as this run placed it, its inventory's")
    export_p = _command(
        sub, "export", export_command, "print the job as a script to submit by hand (sbatch)"
    )
    export_p.add_argument("format", choices=EXPORTS, help="slurm: an sbatch script")
    schema_p = _command(
        sub, "schema", schema_command, "print the inventory's JSON Schema (for editors)"
    )
    schema_p.add_argument(
        "--path", action="store_true", help="print where the installed schema file is instead"
    )
    completion_p = _command(
        sub, "completion", completion_command, "print tab completion for a shell (source it)"
    )
    completion_p.add_argument("shell", choices=SHELLS, help="the shell: " + ", ".join(SHELLS))
    # Hidden: what tab completion asks for RUN (tui/completion.py), fast.
    sub.add_parser("_run-ids").set_defaults(handler=run_ids, command="_run-ids")
    return p


def _quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--quiet",
        action="store_true",
        help="--headless: no training progress line in a pipe (a terminal's live line stays)",
    )


def _exclude(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--exclude",
        metavar="HOSTS",
        help="--headless: leave these hosts out (names or addresses, ranges: node[3-4],gpu07)",
    )


def _deep(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--deep", action="store_true", help=text)
    p.add_argument(
        "--deep-seconds",
        type=float,
        default=60.0,
        metavar="S",
        help="the deep check's time bound (default 60)",
    )


def _common(p: argparse.ArgumentParser, suppress: bool = False) -> None:
    """Options taken before or after the command. A command's copy says SUPPRESS, so that
    leaving it out there keeps what the main parser read."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    p.add_argument(
        "--headless",
        action="store_true",
        default=default(False),
        help="no dashboard: print to the terminal, exit with a status",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        default=default(False),
        help="--headless: every host's own lines (default: the same words from many hosts "
        "as one line, a line per phase)",
    )
    p.add_argument(
        "-i",
        "--inventory",
        type=Path,
        default=default(Path("inventory.yaml")),
        help="host inventory (default: ./inventory.yaml)",
    )
    p.add_argument(
        "--runs-root",
        type=Path,
        metavar="DIR",
        default=default(None),
        help="where each run's directory goes (default: the user data dir's runs/)",
    )


def _command(
    sub: argparse._SubParsersAction[_Parser], name: str, handler: Command, text: str
) -> argparse.ArgumentParser:
    p = sub.add_parser(
        name,
        prog=f"ddptui {name}",
        help=text,
        description=text,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(p, suppress=True)
    p.set_defaults(handler=handler, command=name)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in args_in:  # everything after -- goes to the training script
        cut = args_in.index("--")
        args_in, extra = args_in[:cut], args_in[cut + 1 :]
    p = parser()
    args = p.parse_args(args_in)
    raise_open_files_limit()
    try:
        return int(args.handler(args, extra))
    except UsageError as exc:
        print(f"ddptui: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # before the run took Ctrl-C over (loading, connecting a check)
        return EXIT_INTERRUPTED


def raise_open_files_limit() -> None:
    """Soft open-files limit up to the hard one: a connection per host, a rank log each...
    1,024 (Linux) or 256 (macOS) runs out near a thousand hosts (ParallelSSH's "Too many open
    files"). macOS refuses an unlimited value: its OPEN_MAX then."""
    import resource

    infinity = resource.RLIM_INFINITY
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for target in (hard, 10240):
        if soft == infinity or (target != infinity and target <= soft):
            continue  # never lower it
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return
        except (ValueError, OSError):
            continue


# -- commands ----------------------------------------------------------------------------------


def dashboard(args: argparse.Namespace, extra: list[str]) -> int:
    """The Textual app, opened on the command (or idle); it reads the inventory itself and
    shows a mistake in it in place, where the user fixes the file and reloads."""
    if args.headless:
        raise UsageError("--headless needs a command: launch or check")
    if getattr(args, "run_dir", None):
        raise UsageError(
            "--run-dir is one run's directory: use it with --headless launch "
            "(the dashboard puts each run under --runs-root)"
        )
    for option in ("skip_checks", "detach", "verbose", "exclude", "wait"):
        if getattr(args, option, False):
            raise UsageError(f"--{option.replace('_', '-')} needs --headless")
    if getattr(args, "sync", None) is not None:
        raise UsageError("--sync and --no-sync need --headless (the dashboard follows job.sync)")
    if extra and args.command not in (None, "launch"):
        raise UsageError(f"{args.command} takes no script arguments (after --)")
    root = runs_root(args)
    from .dashboard.app import create_app  # Textual loads only for the dashboard

    app = create_app(args.inventory, runs_dir=root, extra_args=extra, start=args.command)
    return app.run() or 0


def _dashboard_on_run(args: argparse.Namespace) -> int:
    """`ddptui attach|stop|stacks RUN`, `ddptui runs`: the dashboard, opened on that."""
    run = getattr(args, "run", None)
    if run is not None:
        from ddptui.remote.store.runs import RunError, resolve

        try:
            resolve(run)  # a RUN naming no run is one line here, not a dashboard
        except RunError as exc:
            raise UsageError(str(exc)) from None
    from .dashboard.app import create_app

    return create_app(args.inventory, start=args.command, run=run).run() or 0


def launch_command(args: argparse.Namespace, extra: list[str]) -> int:
    """`launch`: the dashboard launching at once, or --headless: print every line, exit."""
    if not args.headless:
        return dashboard(args, extra)
    if args.run_dir and args.runs_root:
        raise UsageError("--run-dir and --runs-root: give one (--run-dir is the run's own)")
    import asyncio

    return asyncio.run(_launch(args, extra))


async def _launch(args: argparse.Namespace, extra: list[str]) -> int:
    """The headless launch: a Slurm login node logged into while the inventory is checked
    (remote/slurm/early.py), no garbage collected while start-up makes what lasts (then frozen
    out of every later collection): a Slurm submission waits for all of it."""
    from ddptui.remote.slurm import early

    begun = await early.begin(args.inventory)
    gc.disable()
    try:
        launching = _launching(args, extra)
        gc.freeze()
        gc.enable()
        return await launching
    finally:
        gc.enable()
        if begun is not None:
            begun.drop()  # unless the launch took it on


def _launching(args: argparse.Namespace, extra: list[str]) -> Coroutine[Any, Any, int]:
    """The headless launch, ready to run: its inventory read, its run directory chosen."""
    inv = load_inventory(args.inventory, args.exclude)
    if args.sync is not None:
        inv = _with_sync(inv, args.sync)
    exclude = _slurm_exclude(args.exclude) if inv.slurm else ()
    if inv.slurm is not None and args.wait is not None:  # sbatch queues it: Slurm's GPUs
        raise UsageError(
            f"--wait: {args.inventory} hands the job to Slurm (slurm:), whose queue it waits "
            "in: its nodes' GPUs are Slurm's to share, not leased (drop --wait)"
        )
    from ddptui.remote.store.runs import new_run_id

    from .headless import launch

    run_id = new_run_id()
    if args.run_dir:
        run_dir = usable(args.run_dir, "--run-dir", empty=True)
    else:
        run_dir = runs_root(args) / run_id
    return launch.launch(
        inv, run_dir, extra, not args.skip_checks, args.detach, run_id=run_id,
        deep=_deep_seconds(args), verbose=args.verbose, quiet=args.quiet, exclude=exclude,
        wait=_wait_seconds(args.wait),
    )  # fmt: skip


def _wait_seconds(text: str | None) -> float | None:
    """--wait's limit in seconds (inf: none), or None without --wait: `90`, `30s`, `10m`, `2h`."""
    if text is None:
        return None
    if text == "inf":
        return float("inf")
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise UsageError(f"--wait {text}: give a time above 0 (90, 30s, 10m, 2h), or none")
    return seconds


def who_command(args: argparse.Namespace, extra: list[str]) -> int:
    """`who`: every host's GPUs, free, held (by whom) or busy (with what), and the queue; it
    always prints (the dashboard's hosts pane says it live)."""
    _no_extra(args, extra)
    inv = load_inventory(args.inventory)
    if inv.slurm is not None:  # Slurm says who holds its nodes: squeue
        raise UsageError(f"{args.inventory}: slurm: its nodes are Slurm's to share (squeue)")
    import asyncio

    from .headless.who import who

    return asyncio.run(who(inv, as_json=args.json))


def _slurm_exclude(hosts: str | None) -> tuple[str, ...]:
    """--exclude for a Slurm job: the nodes Slurm must not give it (sbatch --exclude)."""
    from ddptui.remote import fold

    try:
        return tuple(fold.names(hosts)) if hosts else ()
    except ValueError as exc:
        raise UsageError(f"--exclude {hosts!r}: {exc}") from None


def check_command(args: argparse.Namespace, extra: list[str]) -> int:
    """`check`: the dashboard on the hosts, or --headless (or --json): a table, exit 0/1/3."""
    if not (args.headless or args.json):
        return dashboard(args, extra)
    if extra:
        raise UsageError("check takes no script arguments (after --)")
    inv = load_inventory(args.inventory, args.exclude)
    if inv.slurm is not None:  # no node is Slurm's to check before it gives them
        raise UsageError(
            f"{args.inventory}: slurm: has no hosts to check before Slurm gives them; "
            "`ddptui --headless launch` asks Slurm first (sbatch --test-only)"
        )
    import asyncio

    from .headless.check import check

    deep = _deep_seconds(args)
    root = runs_root(args) if deep is not None else None
    checking = check(inv, as_json=args.json, deep=deep, runs_root=root, verbose=args.verbose)
    return asyncio.run(checking)


def _deep_seconds(args: argparse.Namespace) -> float | None:
    """--deep's time bound, or None without --deep."""
    if not args.deep:
        return None
    if not args.deep_seconds > 0:
        raise UsageError("--deep-seconds must be a number of seconds above 0")
    return float(args.deep_seconds)


def attach_command(args: argparse.Namespace, extra: list[str]) -> int:
    """`attach RUN`: its lines from the first, then live; its exit status (130: detached)."""
    from .headless import lifecycle

    return _on_run(
        args,
        extra,
        lambda: lifecycle.attach(args.run, args.tail, verbose=args.verbose, quiet=args.quiet),
    )


def stop_command(args: argparse.Namespace, extra: list[str]) -> int:
    """`stop RUN`: 0 once nothing of it is left on its hosts, 1 naming what is."""
    from .headless import lifecycle

    return _on_run(args, extra, lambda: lifecycle.stop(args.run, verbose=args.verbose))


def runs_command(args: argparse.Namespace, extra: list[str]) -> int:
    """`runs`: the history, its statuses asked of the hosts where no summary says."""
    from .headless import lifecycle

    return _on_run(args, extra, lambda: lifecycle.history(args.json))


def plot_command(args: argparse.Namespace, extra: list[str]) -> int:
    """`plot RUN [METRIC]`: the curve in the terminal (always: there is no dashboard view)."""
    from .headless.plot import plot

    args.headless = True
    return _on_run(args, extra, lambda: plot(args.run, args.metric))


def stacks_command(args: argparse.Namespace, extra: list[str]) -> int:
    """`stacks RUN`: every rank's stack, grouped and saved in the run dir; 1 if any is missing."""
    from .headless.stacks import print_stacks

    return _on_run(args, extra, lambda: print_stacks(
        args.run, as_json=args.json, native=args.native, verbose=args.verbose))  # fmt: skip


def _on_run(
    args: argparse.Namespace, extra: list[str], work: Callable[[], Coroutine[Any, Any, int]]
) -> int:
    """A command on runs already started: the dashboard opened on it, or with --headless (or
    --json) printed; a RUN that names no run, or several, is a usage mistake."""
    if extra:
        raise UsageError(f"{args.command} takes no script arguments (after --)")
    if not (args.headless or getattr(args, "json", False) or getattr(args, "tail", None)):
        if args.verbose:
            raise UsageError("--verbose needs --headless")
        return _dashboard_on_run(args)
    import asyncio

    from ddptui.remote.store.runs import RunError

    try:
        return asyncio.run(work())
    except RunError as exc:
        raise UsageError(str(exc)) from None


def serve_command(args: argparse.Namespace, extra: list[str]) -> int:
    """`serve [RUN]`: the dashboard (on RUN) served to browsers until Ctrl-C."""
    if args.headless or args.verbose or extra:
        raise UsageError("serve takes no --headless, --verbose or script arguments")
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port}: give a port from 1 to 65535")
    run = None
    if args.run is not None:
        from ddptui.remote.store.runs import RunError, resolve

        try:
            run = str(resolve(args.run).dir)  # each browser's dashboard opens this very run
        except RunError as exc:
            raise UsageError(str(exc)) from None
    from . import web  # aiohttp and textual-serve load only here

    try:
        web.serve(args.inventory, runs_root=runs_root(args), run=run, host=args.host,
                  port=args.port, control=args.control)  # fmt: skip
    except OSError as exc:  # the port taken, an address not this machine's
        raise UsageError(f"serve on {args.host}:{args.port}: {exc.strerror or exc}") from None
    return 0


def init_command(args: argparse.Namespace, extra: list[str]) -> int:
    """`init [PATTERN|HOST ...]`: an inventory of ~/.ssh/config's hosts written as -i names it
    (never over one, unless --force), then checked (exit as `check`) unless --no-check."""
    _no_extra(args, extra)
    import asyncio
    import os

    from ddptui.remote import init_inventory

    path: Path = args.inventory
    exists = f"{path} exists: give another -i, or --force to overwrite it"
    if os.path.lexists(path) and not args.force:  # said before the hosts are asked
        raise UsageError(exists)
    workdir = args.workdir or str(Path.cwd())
    try:
        text, found = asyncio.run(
            init_inventory.inventory(args.hosts, script=args.script, workdir=workdir)
        )
    except init_inventory.InitError as exc:
        raise UsageError(str(exc)) from None
    try:
        init_inventory.write(path, text, force=args.force)
    except FileExistsError:  # made meanwhile: O_EXCL never writes over it, or through a link
        raise UsageError(exists) from None
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    print(f"ddptui: wrote {path}: {found}", file=sys.stderr)
    if args.no_check:
        return 0
    print(f"ddptui: checking it (ddptui --headless check -i {path})", file=sys.stderr)
    args.headless, args.json, args.exclude, args.deep = True, False, None, False
    return check_command(args, [])


def ssh_command(args: argparse.Namespace, extra: list[str]) -> int:
    """`ssh HOST|NODE|rN`: OpenSSH's ssh to that host with the inventory's settings, a login
    shell in the job's workdir; this process becomes it (its exit status is ssh's)."""
    _no_extra(args, extra)
    import os

    from ddptui.remote.agents import shell

    ranks = None
    if args.run:  # the run's own inventory, and its ranks where it placed them
        from ddptui.remote.store.runs import RunError, resolve

        try:
            record = resolve(args.run)
            inv, ranks = record.inventory(), shell.placed(record.dir / "events.jsonl")
        except (RunError, shell.ShellError) as exc:
            raise UsageError(str(exc)) from None
    else:
        inv = load_inventory(args.inventory)
    try:
        command = shell.shell(shell.find(inv, args.target, ranks))
        if command.cwd:
            os.chdir(command.cwd)
    except shell.ShellError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{command.cwd}: {exc.strerror}") from None
    os.execvp(command.argv[0], command.argv)


def _no_extra(args: argparse.Namespace, extra: list[str]) -> None:
    if extra:
        raise UsageError(f"{args.command} takes no script arguments (after --)")


def export_command(args: argparse.Namespace, extra: list[str]) -> int:
    """`export slurm`: the inventory's job as an sbatch script, printed (nothing contacted)."""
    _no_extra(args, extra)
    inv = load_inventory(args.inventory)
    if inv.slurm is None:
        raise UsageError(f"{args.inventory} has no slurm: (its nodes, partition...) to export")
    from ddptui.remote.slurm.export import export

    sys.stdout.write(export(inv))
    return 0


def schema_command(args: argparse.Namespace, extra: list[str]) -> int:
    """`schema`: the inventory's JSON Schema, from the model (or --path: the shipped file's)."""
    from ddptui.remote import schema

    sys.stdout.write(f"{schema.FILE}\n" if args.path else schema.text())
    return 0


def completion_command(args: argparse.Namespace, extra: list[str]) -> int:
    """`completion SHELL`: the script that completes ddptui's commands, options, inventory
    files and run ids in that shell."""
    from .completion import script

    sys.stdout.write(script(parser(), args.shell))
    return 0


def run_ids(args: argparse.Namespace, extra: list[str]) -> int:
    """`_run-ids`: every run's id, newest first, one a line (for tab completion)."""
    from ddptui.remote.store.runlist import ids

    sys.stdout.write("".join(f"{run_id}\n" for run_id in ids()))
    return 0


# -- shared ------------------------------------------------------------------------------------


def load_inventory(path: Path, exclude: str | None = None) -> Inventory:
    """The inventory, less the hosts --exclude names (node ranks closed up); a Slurm job's
    whole (Slurm leaves those nodes out: sbatch --exclude)."""
    from ddptui.remote import inventory

    try:
        inv = inventory.load(path)
        return inventory.without(inv, exclude) if exclude and not inv.slurm else inv
    except inventory.InventoryError as exc:
        raise UsageError(str(exc)) from None


def _with_sync(inv: Inventory, on: bool) -> Inventory:
    from ddptui.remote import inventory

    try:
        return inventory.with_sync(inv, on)
    except inventory.InventoryError as exc:
        raise UsageError(str(exc)) from None


def runs_root(args: argparse.Namespace) -> Path:
    from ddptui.remote.store import runlist

    return usable(args.runs_root or runlist.root(), "runs root", empty=False)


def usable(path: Path, what: str, *, empty: bool) -> Path:
    """A directory made (0700) and writable, and empty if asked, before anything connects."""
    from ddptui.remote.store.record import RunDirError, usable_dir

    try:
        return usable_dir(path, empty=empty)
    except RunDirError as exc:
        raise UsageError(f"{what} {exc}") from None


if __name__ == "__main__":
    sys.exit(main())
