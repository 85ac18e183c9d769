"""Shared fixtures. A test that leaves asyncio tasks running fails (a leak hides real bugs)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest


@pytest.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    before = set(asyncio.all_tasks())
    yield
    # Give tasks that are being cancelled one turn of the loop to finish.
    await asyncio.sleep(0)
    leaked = [
        task
        for task in asyncio.all_tasks() - before
        if task is not asyncio.current_task() and not task.done()
    ]
    for task in leaked:
        task.cancel()
    assert not leaked, f"test left tasks running: {leaked}"
