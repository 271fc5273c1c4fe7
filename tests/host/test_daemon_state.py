"""The supervisor's state file, saved from several threads at once (the job's, a viewer's)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from ddptui.remote.host import protocol
from ddptui.remote.host.daemon import Daemon
from ddptui.remote.host.state import STATE

SPEC = {"run_id": "r", "node": 0, "names": ["a"], "argv": ["python3", "t.py"], "secret": "s"}


def test_threads_saving_the_state_at_once_all_succeed(tmp_path: Path) -> None:
    """A launch that detaches as its job starts: the viewer's thread saves the new mode while
    the main thread saves "running". Both must land; a lost race killed the supervisor."""
    daemon = Daemon(protocol.spec(SPEC), str(tmp_path))
    failed: list[BaseException] = []
    go = threading.Barrier(4)

    def save(n: int) -> None:
        go.wait()
        for i in range(300):
            try:
                daemon.save_state(**{f"saver{n}": i})
            except BaseException as exc:  # any is the bug
                failed.append(exc)

    threads = [threading.Thread(target=save, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    daemon.spool.close()
    assert failed == []
    saved = json.loads((tmp_path / STATE).read_text())
    assert all(saved[f"saver{n}"] == 299 for n in range(4))
    assert not (tmp_path / (STATE + ".tmp")).exists()
