"""nvidia-smi stand-ins whose health reads go wrong on demand, over a healthy recording: what a
healthy host's reads met in the field (issue 42).

Each is a wrapper in front of the recorded stand-in (tests/data/nvidia-smi/stand-in.sh): while
its `armed` file counts, the next health queries (remote/host/health.py's) go wrong, counting it
down; every other query, and every read after, is the recording's. Each health query asked is
a line in `asked`. linger: every query leaves a child holding its output open a moment after it
exits, so that whoever waits on any child (a supervisor's reaper) has its exit status first.

    killed  the read waits until killed, its pid in `pid`: SIGTERM from outside, as a neighbour's
            sweep sends it
    slow    the read takes a second (its pid in `pid`), then answers as recorded (and says so in
            `answered`)
    short   the read answers a row cut short, exit 0
    failed  the read fails as nvidia-smi does when it cannot reach a GPU (exit 15, its words)
"""

from __future__ import annotations

import shlex
from pathlib import Path

import nvidia_smi

PID = 'echo $$ > "$dir/pid.new"; mv "$dir/pid.new" "$dir/pid"'  # whole, for a reader polling it
FAULTS = {
    "killed": f"{PID}; exec sleep 60",
    "slow": f'{PID}; sleep 1; touch "$dir/answered"',
    "short": 'echo "0, 00000000:18:00.0, 0"; exit 0',
    "failed": 'echo "Unable to determine the device handle for GPU0000:3A:00.0: Unknown Error"; '
    "exit 15",
}
# The health query's first words, whichever field set is asked.
HEALTH_QUERY = "--query-gpu=index,pci.bus_id,"


class FaultySmi:
    """`bin_dir/nvidia-smi` answering as `machine` (a recording's name or a folder) except, once
    armed, for one health read that goes wrong as `fault` says."""

    def __init__(self, bin_dir: Path, machine: str, fault: str = "short", dir: Path | None = None,
                 linger: bool = False) -> None:  # fmt: skip
        self.dir = dir or bin_dir.parent / "smi-fault"
        self.dir.mkdir(parents=True, exist_ok=True)
        recorded = self.dir / "recorded-nvidia-smi"
        recorded.write_text(nvidia_smi.stand_in(machine))
        recorded.chmod(0o755)
        here = shlex.quote(str(self.dir))
        self.path = bin_dir / "nvidia-smi"
        bin_dir.mkdir(parents=True, exist_ok=True)
        self.path.write_text(
            f"#!/bin/sh\ndir={here}\n"
            + ("sleep 0.3 &\n" if linger else "")
            + f'case "$*" in {HEALTH_QUERY}*)\n'
            '    echo >> "$dir/asked"\n'
            '    n=$(cat "$dir/armed" 2>/dev/null)\n'
            '    if [ -n "$n" ]; then\n'
            '        echo $((n - 1)) > "$dir/armed"\n'
            '        [ "$n" -gt 1 ] || rm "$dir/armed"\n'
            f"        {FAULTS[fault]}\n"
            "    fi ;;\n"
            "esac\n"
            f'exec "$dir/recorded-nvidia-smi" "$@"\n'
        )
        self.path.chmod(0o755)

    @property
    def armed(self) -> Path:
        return self.dir / "armed"

    def asked(self) -> int:
        """How many health queries it was asked."""
        path = self.dir / "asked"
        return len(path.read_text().splitlines()) if path.exists() else 0

    @property
    def pid(self) -> Path:
        """The killed read's pid, once it waits."""
        return self.dir / "pid"

    def arm(self, times: int = 1) -> None:
        """The next `times` health reads go wrong."""
        self.armed.write_text(str(times))
