"""`ddptui --help` start-up: its wall time over a bare `python -c pass`, target at most 0.15 s.

    .venv/bin/python scripts/bench_help.py [--reps 21]

Both commands run alternately from this checkout, under the same interpreter (site and the
editable install's finder included in both). Also lists the biggest imports of `--help`
(python -X importtime), where a slow start would come from.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from bench_common import REPO, load, median, table

TARGET_S = 0.15
VARIANTS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "ddptui --help": [sys.executable, "-m", "ddptui.tui.cli", "--help"],
    "ddptui launch --help": [sys.executable, "-m", "ddptui.tui.cli", "launch", "--help"],
}


def wall(argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=REPO, env=env)
    return time.perf_counter() - t0


def biggest_imports(argv: list[str], n: int = 8) -> list[tuple[int, str]]:
    """(cumulative µs, module) of the top-level imports that cost most."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    err = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        check=True,
    ).stderr
    rows = []
    for line in err.splitlines():  # "import time:  self |  cumulative | <indent>module"
        fields = line.removeprefix("import time:").split("|")
        top_level = len(fields) == 3 and fields[2][:2] != "  "
        if top_level and fields[1].strip().isdigit():
            rows.append((int(fields[1]), fields[2].strip()))
    return sorted(rows, reverse=True)[:n]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=21, help="runs of each command (default 21)")
    args = p.parse_args(argv)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.reps):
        for name, cmd in VARIANTS.items():
            times[name].append(wall(cmd))
    base = median(times["python -c pass"])
    rows = [[name, f"{median(ts):.3f}", f"{median(ts) - base:+.3f}"] for name, ts in times.items()]
    print(f"median of {args.reps} runs each, alternating; {load()}")
    print(table(["command", "wall s", "over python"], rows))
    print("\nbiggest imports of ddptui --help (cumulative ms):")
    for us, name in biggest_imports(VARIANTS["ddptui --help"]):
        print(f"  {us / 1000:6.1f}  {name}")
    over = median(times["ddptui --help"]) - base
    verdict = "ok" if over <= TARGET_S else "TOO SLOW"
    print(
        f"\nddptui --help: {over:.3f} s over a bare python start (target <= {TARGET_S}): {verdict}"
    )
    return 0 if over <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
