"""The `ddptui` command: the dashboard by default, `--headless launch|check` for scripts and CI."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from remote import inventory
from remote.run import EXIT_INTERRUPTED, EXIT_USAGE

USAGE = """\
ddptui [-i INVENTORY]                                  the dashboard
ddptui --headless launch [-i INVENTORY] [--run-dir DIR] [-- SCRIPT ARGS...]
ddptui --headless check  [-i INVENTORY] [--json]
ddptui --headless launch --detach ...                  start, print the run id, leave it running
ddptui --headless attach RUN [--tail N]                replay and follow a run (Ctrl-C detaches)
ddptui --headless stop RUN                             stop a run on every host
ddptui --headless runs [--json]                        every run, newest first"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ddptui",
        usage=USAGE,
        description="Launch multi-node PyTorch training over SSH and watch every rank.",
        epilog="exit status: 0 every rank succeeded, 1 a rank or check failed, "
        "2 bad usage or inventory, 3 a host could not be reached, 130 interrupted",
    )
    p.add_argument("--headless", action="store_true", help="no dashboard: print to the terminal")
    p.add_argument(
        "-i",
        "--inventory",
        type=Path,
        default=Path("inventory.yaml"),
        help="host inventory (default: ./inventory.yaml)",
    )
    p.add_argument(
        "command",
        nargs="?",
        choices=["launch", "check", "attach", "stop", "runs"],
        help="with --headless: launch the job, or only check the hosts",
    )
    p.add_argument("run", nargs="?", help="attach, stop: a run id, a unique prefix, or a run dir")
    p.add_argument("--detach", action="store_true", help="launch: leave the run running")
    p.add_argument("--tail", type=int, help="attach: replay only the last N lines")
    p.add_argument(
        "--run-dir",
        type=Path,
        help="where the run's logs go (default: the user data dir, runs/<run id>)",
    )
    p.add_argument("--json", action="store_true", help="check: print the facts as JSON")
    p.add_argument("--skip-checks", action="store_true", help="launch: do not check hosts first")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in args_in:  # everything after -- goes to the training script
        cut = args_in.index("--")
        args_in, extra = args_in[:cut], args_in[cut + 1 :]
    p = parser()
    args = p.parse_args(args_in)
    if not args.headless:  # the app reads the inventory itself and shows a mistake in place
        return _dashboard(args.inventory, args.run_dir, extra)
    if not args.command:
        p.error("--headless needs a command: launch or check")
    if args.command in ("attach", "stop", "runs"):
        return _lifecycle(args)
    try:
        inv = inventory.load(args.inventory)
    except inventory.InventoryError as exc:
        print(f"ddptui: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from . import headless

    if args.command == "launch":
        launch = headless.launch(inv, args.run_dir, extra, not args.skip_checks, args.detach)
        return asyncio.run(launch)
    try:
        return asyncio.run(headless.check(inv, as_json=args.json))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _lifecycle(args: argparse.Namespace) -> int:
    from remote.runs import RunError

    from . import lifecycle

    if args.command == "runs":
        return asyncio.run(lifecycle.history(args.json))
    if not args.run:
        print(
            f"ddptui: {args.command} needs a run: an id, a unique prefix, or a run dir",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        if args.command == "attach":
            return asyncio.run(lifecycle.attach(args.run, args.tail))
        return asyncio.run(lifecycle.stop(args.run))
    except RunError as exc:
        print(f"ddptui: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _dashboard(path: Path, runs_dir: Path | None, extra: Sequence[str]) -> int:
    """The Textual app; a mistake in the inventory opens it on the error screen, where the
    user fixes the file and reloads it. Each run's logs go to runs_dir/<run id>."""
    from .app import create_app  # Textual loads only for the dashboard

    return create_app(path, runs_dir=runs_dir, extra_args=extra).run() or 0


if __name__ == "__main__":
    sys.exit(main())
