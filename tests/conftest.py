"""Shared fixtures. A test that leaves asyncio tasks running fails (a leak hides real bugs).
The real control plane for `k8s` tests is started once, on first use."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from tests import controlplane
from tests.controlplane import ControlPlane


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


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The real control plane of tests/cluster/, started once for the session's `k8s` tests."""
    try:
        plane = controlplane.start(tmp_path_factory.mktemp("k8s"))
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)
    try:
        yield plane
    finally:
        controlplane.stop(plane)
