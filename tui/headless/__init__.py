"""The `--headless` commands: the engine's events printed for a terminal, a script or CI.

`printer.py` renders a run's events (rank lines as written; ddptui's own lines folded across
hosts by `fold.py`) through `console.py` (the streams, a terminal's live line, escapes made
safe); one module per command: `launch.py`, `check.py`, `lifecycle.py` (attach, stop, runs),
`stacks.py`.
"""
