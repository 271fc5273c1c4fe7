"""Short questions to a host's side of ddptui, one exec each: sweep a run, report runs' states."""

from __future__ import annotations

from typing import Any

from . import bootstrap
from .host import wire
from .transport import HostError, Transport

TIMEOUT = 60.0


async def ask(
    transport: Transport, cmd: dict[str, Any], timeout: float = TIMEOUT
) -> dict[str, Any]:
    """Run one command of remote/host/main.py on the host; its answer (a dict)."""
    argv = bootstrap.command(transport.host.python)
    res = await transport.run(argv, input=bootstrap.payload(cmd), timeout=timeout)
    answers = [it for it in wire.WireReader().feed(res.stdout) if isinstance(it, dict)]
    if not answers:
        said = res.stderr.decode("utf-8", "replace").strip().splitlines()
        raise HostError(transport.host.name, said[-1] if said else f"no answer (exit {res.code})")
    return answers[-1]


async def sweep(transport: Transport, run_id: str, node: int, grace: float = 5.0) -> list[str]:
    """Stop what is left of a run's node by its tags; what could not be killed."""
    got = await ask(transport, {"do": "sweep", "run_id": run_id, "node": node, "grace": grace})
    return [str(s) for s in got.get("survivors", ())]


async def status(transport: Transport, nodes: list[tuple[str, int]]) -> dict[str, Any]:
    """{run_id: {node: state or None}} for (run id, node) pairs kept on this host."""
    got = await ask(transport, {"do": "status", "nodes": [list(n) for n in nodes]})
    runs = got.get("runs", {})
    assert isinstance(runs, dict)
    return runs
