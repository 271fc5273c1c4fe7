"""Every line a rank prints reaches the console and its rank-N.log, whole and in order.

The real engine on this machine (local transport): torchrun, the supervisor, the relay, the
recorder and the headless printer. Speed is scripts/bench_relay.py's business, not this test's.
"""

from __future__ import annotations

import io
import socket
import sys
from pathlib import Path

import yaml

from ddptui.remote import inventory
from ddptui.remote.run.runner import Run
from ddptui.tui.headless.printer import Printer

REPO = Path(__file__).resolve().parents[2]
LINES = 20_000  # per rank: enough for many batches, some holding both ranks' lines


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_inventory(path: Path) -> inventory.Inventory:
    doc = {
        "defaults": {"transport": "local", "workdir": str(REPO), "python": sys.executable},
        "hosts": [{"host": "localhost", "name": "node0"}],
        "job": {
            "script": "scripts/print_lines.py",
            "args": [str(LINES)],
            "nproc_per_node": 2,
            "master_port": free_port(),
        },
    }
    path.write_text(yaml.safe_dump(doc))
    return inventory.load(path)


async def test_every_line_reaches_console_and_rank_log(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path / "inventory.yaml")
    out, err = io.StringIO(), io.StringIO()
    run = Run(inv, Printer(out, err), run_dir=tmp_path / "run", checks=False)
    fin = await run.execute()
    assert fin.exit_code == 0, err.getvalue()[-2000:]
    console = out.getvalue().splitlines()
    for rank in (0, 1):
        want = [f"line {i} from rank {rank}" for i in range(LINES)]
        tag = f"[r{rank} node0] "
        assert [line[len(tag) :] for line in console if line.startswith(tag)] == want
        log = (tmp_path / "run" / f"rank-{rank}.log").read_text()
        assert log == "".join(f"{line}\n" for line in want)


def test_a_bar_redrawn_with_carriage_returns_is_told_before_its_line_ends(tmp_path: Path) -> None:
    """tqdm writes no newline until its bar closes: its last drawing goes meanwhile, once a
    second, for progress only; the line itself waits whole."""
    from ddptui.remote.host.tail import RankFile, RankTail

    spooled: list[bytes] = []
    told: list[tuple[int, bytes]] = []
    tail = RankTail(str(tmp_path), [0], {}, lambda s, d: spooled.append(d),
                    lambda r, t: told.append((r, t)))  # fmt: skip
    f = RankFile(str(tmp_path / "x"), b"2", 0, 0)
    f.rank = 0
    tail._feed(f, b"\r 10%|#  | 50/500 [00:07<01:03,  7.09it/s]\r 11%|#  | 51/500 [00:07<01:03,")
    tail._feed(f, b"  7.11it/s]\r 12%|#  | 52/5")
    assert told == [(0, b" 10%|#  | 50/500 [00:07<01:03,  7.09it/s]")]  # then once a second
    assert spooled == []
    f.redrawn = 0.0
    tail._feed(f, b"00 [00:07<01:03,  7.12it/s]\r")
    assert told[-1] == (0, b" 12%|#  | 52/500 [00:07<01:03,  7.12it/s]")
    tail._feed(f, b"done\n")  # the line, whole, as the bar wrote it
    assert len(spooled) == 1 and spooled[0].startswith(b"[0]:\r 10%|#  | 50/500")
    assert spooled[0].endswith(b"7.12it/s]\rdone\n")
