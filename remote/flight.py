"""NCCL's flight recorder, on demand (design §8).

With `nccl.flight_recorder: true` every rank keeps a ring of its last collectives
(TORCH_NCCL_TRACE_BUFFER_SIZE; TORCH_FR_BUFFER_SIZE in newer torch), dumps it when NCCL times
out (TORCH_NCCL_DUMP_ON_TIMEOUT) and, once its process group exists, reads a pipe of its own
(`<TORCH_NCCL_DEBUG_INFO_PIPE_FILE><rank>.pipe`): a byte there dumps the ring to
`<TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>`. The files live in the node's scratch directory on
its host; a stacks dump pokes every pipe and brings the traces back (stacks_host.py), because
hosts rarely share a filesystem. Here they are saved in the run directory and, when torch's
analyser is available to the launcher, analysed: it names the ranks that missed a collective.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BUFFER = 2000  # collectives each rank remembers
PREFIX = "nccl_trace_rank_"
ANALYSE_TIMEOUT = 120.0
VERDICT_LINES = 12  # of the analyser's output, on the console and in the dashboard
_NOISE = ("tabulate is not installed",)


def env(scratch: str) -> dict[str, str]:
    """The variables that turn the flight recorder on for every rank of a node."""
    trace = f"{scratch}/{PREFIX}"
    return {
        "TORCH_NCCL_TRACE_BUFFER_SIZE": str(BUFFER),
        "TORCH_FR_BUFFER_SIZE": str(BUFFER),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": trace,
        "TORCH_FR_DUMP_TEMP_FILE": trace,
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{scratch}/nccl_pipe_rank_",
    }


@dataclass
class Collected:
    """The traces a stacks dump brought back, and what became of them."""

    traces: dict[int, bytes]  # rank → its dump (a pickle, as torch wrote it)
    missing: dict[int, str]  # rank → why it has none
    dir: Path | None = None
    verdict: str | None = None  # the analyser's findings; None when it is not available
    analyser: list[str] = field(default_factory=list)  # the command that analysed them

    async def save(self, where: Path) -> None:
        """Write each rank's trace into `where` and analyse them there."""
        if not self.traces:
            return
        where.mkdir(parents=True, exist_ok=True)
        for rank, data in self.traces.items():
            (where / f"{PREFIX}{rank}").write_bytes(data)
        self.dir = where
        self.analyser = analyser()
        if self.analyser:
            self.verdict = await analyse(self.analyser, where)
            (where / "analysis.txt").write_text(self.verdict + "\n")

    def lines(self) -> list[str]:
        head = f"flight recorder: {len(self.traces)} trace(s)"
        if self.dir is not None:
            head += f" in {self.dir}"
        out = [head]
        out += [f"  rank {r}: {why}" for r, why in sorted(self.missing.items())]
        if self.dir is not None and not self.analyser:
            out.append("  no analyser here (torch not installed for ddptui: torchfrtrace DIR)")
        elif self.verdict is not None:
            out += ["  " + ln for ln in self.verdict.splitlines()[:VERDICT_LINES]]
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "dir": str(self.dir) if self.dir else None,
            "ranks": sorted(self.traces),
            "missing": {str(r): why for r, why in sorted(self.missing.items())},
            "verdict": self.verdict,
        }


def analyser() -> list[str]:
    """torch's flight recorder analyser as the launcher can run it; [] when it has none."""
    beside = Path(sys.executable).with_name("torchfrtrace")
    found = str(beside) if beside.exists() else shutil.which("torchfrtrace")
    if found:
        return [found]
    try:
        module = importlib.util.find_spec("torch.distributed.flight_recorder.fr_trace")
    except (ImportError, ValueError):
        module = None
    return [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace"] if module else []


async def analyse(command: list[str], trace_dir: Path) -> str:
    """The analyser's findings on a directory of traces (its own words, less the noise)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *command, "-p", PREFIX, str(trace_dir),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
    except OSError as exc:
        return f"the analyser could not run: {exc.strerror}"
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), ANALYSE_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return f"the analyser gave no verdict in {ANALYSE_TIMEOUT:g} s"
    lines = [ln for ln in out.decode("utf-8", "replace").splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(_NOISE)]
    if proc.returncode != 0:
        last = lines[-1] if lines else f"exit {proc.returncode}"
        return f"the analyser failed: {last}"
    return "\n".join(lines) or "the analyser found nothing wrong"
