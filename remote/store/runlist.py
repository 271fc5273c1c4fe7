"""Where runs are kept, and their ids, read without the engine: tab completion asks at every
key press, and remote/store/runs.py's imports (pydantic, asyncssh) take ~0.4 s."""

from __future__ import annotations

from pathlib import Path

RUN_JSON = "run.json"


def root() -> Path:
    import platformdirs  # ~35 ms, only where no run directory is given

    return platformdirs.user_data_path("ddptui") / "runs"


def ids() -> list[str]:
    """Every run's id under root(), newest first (ids begin with their start time)."""
    try:
        entries = list(root().iterdir())
    except OSError:
        return []
    return sorted((e.name for e in entries if (e / RUN_JSON).exists()), reverse=True)
