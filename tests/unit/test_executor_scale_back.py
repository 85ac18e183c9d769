"""What a scale-back leaves on the Deployment: a completed record, or none after a cancellation."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from rebalancer.controller.executor import Executor
from rebalancer.controller.model import SURGE_ANNOTATION, Surge, WorkloadInfo
from rebalancer.controller.planner import Reason, ScaleBack

KEY = ("Deployment", "inference", "llm")
SURGE = Surge(3, 1, ("EVENT-1",), ("inference/llm-a",), "2026-01-01T00:00:30Z")


class RecordingWriter:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    async def patch_workload(
        self, kind: str, namespace: str, name: str, patch: dict[str, Any]
    ) -> bool:
        self.patches.append(patch)
        return True


class QuietEvents:
    def emit(self, **_: Any) -> None:
        pass


async def scale_back(reason: Reason) -> dict[str, Any]:
    writer = RecordingWriter()
    workload = WorkloadInfo(
        kind="Deployment", namespace="inference", name="llm", replicas=4, ready_replicas=4,
        template_spec={}, gpus_per_replica=1, annotations={}, surge=SURGE, resource_version="7",
    )  # fmt: skip
    executor = Executor(writer=writer, events=QuietEvents(), workloads={KEY: workload})  # type: ignore[arg-type]
    outcome = await executor.apply(ScaleBack(KEY, 3, reason), datetime(2026, 1, 1, tzinfo=UTC))
    assert outcome.done
    (patch,) = writer.patches
    assert patch["spec"] == {"replicas": 3}
    return patch


async def test_a_finished_surge_keeps_a_completed_record_until_its_pods_are_gone() -> None:
    patch = await scale_back(Reason.REPLACEMENTS_READY)
    record = json.loads(patch["metadata"]["annotations"][SURGE_ANNOTATION])
    assert record["completed"] is True


async def test_a_cancelled_surge_leaves_no_record() -> None:
    """Its pods stay and serve; a completed record would hide them from the next notice."""
    patch = await scale_back(Reason.CANCELLED)
    assert patch["metadata"]["annotations"] == {SURGE_ANNOTATION: None}
