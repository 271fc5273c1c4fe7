"""Regenerate docs/screenshot.svg: the dashboard during a real run of the bundled inventory.

    .venv/bin/python scripts/screenshot_dashboard.py [--out docs/screenshot.svg]
        [--inventory inventory.yaml] [--settle S]

Runs inventory.yaml's job for real (two local nodes, examples/train.py, longer epochs so it is
mid-run), waits until a few epochs are logged, saves Textual's own SVG screenshot, stops it,
and removes that run's logs.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ddptui.remote.store.runs import default_dir  # noqa: E402
from ddptui.tui.dashboard.app import create_app  # noqa: E402
from ddptui.tui.dashboard.logbuffer import TEXT  # noqa: E402

SIZE = (110, 32)
ARGS = ["--epochs", "30", "--step-time", "0.03"]


async def shoot(out: Path, work: Path, source: Path, settle: float) -> None:
    data = yaml.safe_load(source.read_text())
    data["job"]["script"] = str(REPO / data["job"]["script"])
    data["job"]["args"] = ARGS
    inv = work / "inventory.yaml"
    inv.write_text(yaml.safe_dump(data, sort_keys=False))
    app = create_app(inv)  # logs where a user's go, so the screenshot shows that path
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        deadline = time.monotonic() + 180
        while sum(line[TEXT].startswith("epoch ") for line in app.pane.logs.all) < 4:
            if time.monotonic() > deadline or not app.running:
                raise SystemExit("the run did not get far enough for a screenshot")
            await pilot.pause(0.1)
        await pilot.pause(settle)  # e.g. for the GPU monitor's next sample (every 2 s)
        app.pane.flush()
        app.course.show()
        app.clear_notifications()
        await pilot.pause()
        out.write_text(app.export_screenshot(title="ddptui"))
        await pilot.press("s")
        assert app.worker is not None and app.run_id is not None
        await app.worker.wait()
    shutil.rmtree(default_dir(app.run_id), ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=REPO / "docs" / "screenshot.svg")
    p.add_argument("--inventory", type=Path, default=REPO / "inventory.yaml")
    p.add_argument("--settle", type=float, default=0.0, help="seconds more before the shot")
    args = p.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ddptui-shot-") as tmp:
        asyncio.run(shoot(args.out, Path(tmp), args.inventory, args.settle))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
