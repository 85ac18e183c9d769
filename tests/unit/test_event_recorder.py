"""Events are written in the background; what is queued at shutdown is written, within a budget."""

from __future__ import annotations

import asyncio
from typing import Any

from rebalancer.kube.events import EventRecorder

NODE = {"kind": "Node", "name": "aks-gpuspot-0", "apiVersion": "v1"}


class Writer:
    def __init__(self, delay: float = 0.0) -> None:
        self.reasons: list[str] = []
        self.delay = delay

    async def record_event(self, *, reason: str, **_: Any) -> None:
        await asyncio.sleep(self.delay)
        self.reasons.append(reason)


async def test_queued_events_are_written_when_stopping() -> None:
    """A leader stopped right after a surge still leaves its Events (they were lost before)."""
    writer = Writer()
    recorder = EventRecorder(writer, qps=1, burst=1)  # type: ignore[arg-type]
    for reason in ("Cordoned", "Surge", "Drained"):
        recorder.emit(regarding=NODE, reason=reason, message="m")
    stop = asyncio.Event()
    stop.set()
    await asyncio.wait_for(recorder.run(stop), timeout=5)
    assert writer.reasons == ["Cordoned", "Surge", "Drained"]
    assert recorder.dropped == 0


async def test_the_flush_at_shutdown_is_bounded() -> None:
    writer = Writer(delay=0.4)
    recorder = EventRecorder(writer, flush_seconds=1.0)  # type: ignore[arg-type]
    for index in range(10):
        recorder.emit(regarding=NODE, reason=f"R{index}", message="m")
    stop = asyncio.Event()
    stop.set()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await recorder.run(stop)
    assert loop.time() - started < 2.0
    assert 1 <= len(writer.reasons) < 10
    assert recorder.dropped == 10 - len(writer.reasons)
