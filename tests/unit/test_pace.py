"""remote/agents/pace.py: line work in slices, what was queued meanwhile first."""

from __future__ import annotations

import asyncio

import pytest

from ddptui.remote.agents import pace


async def test_no_pacer_unless_installed() -> None:
    assert pace.current() is None
    pacer = pace.install()
    assert pace.current() is pacer
    pace.uninstall()
    assert pace.current() is None


async def test_spent_slice_lets_what_came_meanwhile_run_first() -> None:
    """Budget 0: a slice holds one unit. The units queue, in order; a key's hop, queued during
    a slice, runs before the next slice."""
    loop = asyncio.get_running_loop()
    pacer = pace.Pacer(loop, budget=0.0)
    order: list[str] = []
    pacer.call(lambda: order.append("a"))  # room: now
    loop.call_soon(order.append, "key")
    pacer.call(lambda: order.append("b"))  # spent: waits
    pacer.call(lambda: order.append("c"))
    assert order == ["a"]
    for _ in range(6):
        await asyncio.sleep(0)
    assert order == ["a", "key", "b", "c"]


async def test_a_task_waits_for_its_unit_and_gets_its_exception() -> None:
    loop = asyncio.get_running_loop()
    pacer = pace.Pacer(loop, budget=0.0)
    done: list[int] = []
    pacer.call(lambda: None)  # spends the slice

    def bad() -> None:
        raise ValueError("not a frame")

    first = asyncio.ensure_future(pacer.run(lambda: done.append(1)))
    second = asyncio.ensure_future(pacer.run(bad))
    await first
    assert done == [1] and not second.done()
    with pytest.raises(ValueError, match="not a frame"):
        await second


async def test_a_cancelled_task_s_unit_is_dropped_and_uninstall_runs_the_rest() -> None:
    pacer = pace.install()
    pacer.budget = 0.0
    ran: list[str] = []
    pacer.call(lambda: ran.append("now"))
    pacer.call(lambda: ran.append("queued"))
    task = asyncio.ensure_future(pacer.run(lambda: ran.append("cancelled")))
    await asyncio.sleep(0)  # "queued" ran, its slice is spent: the task's unit waits
    task.cancel()
    pacer.call(lambda: ran.append("later"))
    pace.uninstall()
    assert ran == ["now", "queued", "later"]
