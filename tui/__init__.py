"""The front-ends: `dashboard/` (the Textual app) and `headless/` (the printing commands), two
renderers of the engine's events sharing `text.py`; `cli.py` is the `ddptui` command."""
