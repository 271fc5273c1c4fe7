"""`ddptui --headless launch`: the run's events printed (printer.py) until it ends.

Ctrl-C, SIGTERM, SIGHUP and a closed output (`| head`) all stop the run the same way: every
host stopped, summary.json written, exit 130. A second Ctrl-C leaves at once.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ddptui.remote.exits import EXIT_INTERRUPTED
from ddptui.remote.inventory import Inventory
from ddptui.remote.slurm.run import SlurmRun

from .printer import Printer

if TYPE_CHECKING:
    from ddptui.remote.run.runner import Run


async def launch(
    inv: Inventory,
    run_dir: Path | None,
    extra: Sequence[str],
    checks: bool = True,
    detach: bool = False,
    *,
    run_id: str | None = None,
    deep: float | None = None,
    verbose: bool = False,
    quiet: bool = False,
    exclude: Sequence[str] = (),
    wait: float | None = None,
) -> int:
    stopping = False

    def stop(why: str | None = None) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            if why:
                printer.say(f"{why}: stopping the run")
            run.stop()

    def interrupt() -> None:
        if stopping:  # a second Ctrl-C: leave now; each host's supervisor cleans up alone
            printer.console.show("")  # no live line left behind
            printer.say("interrupted again: leaving; each host stops its part by itself")
            os._exit(EXIT_INTERRUPTED)
        stop()

    printer = Printer(
        on_closed=lambda: stop("output closed"), verbose=verbose, quiet=quiet,
        hosts=() if inv.slurm else inv.hosts,  # Slurm's nodes: once it says which
    )  # fmt: skip
    run: Run | SlurmRun
    if inv.slurm is not None:
        run = SlurmRun(inv, printer, run_dir=run_dir, run_id=run_id, extra_args=extra,
                       detach=detach, exclude=exclude)  # fmt: skip
    else:  # the engine loads here: a Slurm run submits first (remote/slurm/run.py)
        from ddptui.remote.run import checkup
        from ddptui.remote.run.runner import Run

        run = Run(
            inv, printer, run_dir=run_dir, run_id=run_id, extra_args=extra, checks=checks,
            detach=detach, deep=None if deep is None else checkup.deep_first(deep), wait=wait,
        )  # fmt: skip
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, interrupt)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # nohup: outlive the terminal
        loop.add_signal_handler(signal.SIGHUP, stop, "terminal closed (SIGHUP)")
    fin = await run.execute()
    if fin.status == "detached":  # the run id alone on the last line: for scripts
        printer.say(f"detached: run {run.run_id} goes on by itself (ddptui attach {run.run_id})")
        printer.print(f"{run.run_id}\n")
    return fin.exit_code
