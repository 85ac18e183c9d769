"""What a scale-back leaves on the Deployment: a completed record, or none after a cancellation."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from rebalancer.controller.executor import CONFLICT_ATTEMPTS, Executor
from rebalancer.controller.model import SURGE_ANNOTATION, Surge, WorkloadInfo
from rebalancer.controller.planner import Reason, ScaleBack, ScaleUp
from rebalancer.kube.errors import Conflict

KEY = ("Deployment", "inference", "llm")
SURGE = Surge(3, 1, ("EVENT-1",), ("inference/llm-a",), "2026-01-01T00:00:30Z")


class RecordingWriter:
    """Serves the Deployment as the API has it now, and records the patches sent."""

    def __init__(self, replicas: int = 4) -> None:
        self.patches: list[dict[str, Any]] = []
        self.current = {
            "metadata": {
                "namespace": "inference",
                "name": "llm",
                "resourceVersion": "8",
                "annotations": {SURGE_ANNOTATION: SURGE.to_json()},
            },
            "spec": {"replicas": replicas, "template": {"spec": {"containers": []}}},
            "status": {"readyReplicas": replicas},
        }

    async def get_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        return self.current

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
    assert patch["metadata"]["resourceVersion"] == "8"  # the version read now, not the cache's
    return patch


async def test_a_finished_surge_keeps_a_completed_record_until_its_pods_are_gone() -> None:
    patch = await scale_back(Reason.REPLACEMENTS_READY)
    record = json.loads(patch["metadata"]["annotations"][SURGE_ANNOTATION])
    assert record["completed"] is True


async def test_a_cancelled_surge_leaves_no_record() -> None:
    """Its pods stay and serve; a completed record would hide them from the next notice."""
    patch = await scale_back(Reason.CANCELLED)
    assert patch["metadata"]["annotations"] == {SURGE_ANNOTATION: None}


async def test_replicas_changed_since_the_plan_are_not_fought() -> None:
    writer = RecordingWriter(replicas=6)  # an HPA scaled it meanwhile
    executor = Executor(writer=writer, events=QuietEvents(), workloads={})  # type: ignore[arg-type]
    await executor.apply(
        ScaleBack(KEY, 3, Reason.REPLACEMENTS_READY), datetime(2026, 1, 1, tzinfo=UTC)
    )
    (patch,) = writer.patches
    assert "spec" not in patch
    assert json.loads(patch["metadata"]["annotations"][SURGE_ANNOTATION])["completed"] is True


async def test_a_stale_plan_never_surges_twice() -> None:
    writer = RecordingWriter(replicas=4)  # the surge for llm-a is already there
    executor = Executor(writer=writer, events=QuietEvents(), workloads={})  # type: ignore[arg-type]
    stale = ScaleUp(KEY, 4, Surge(3, 1, ("EVENT-1",), ("inference/llm-a",), None))
    outcome = await executor.apply(stale, datetime(2026, 1, 1, tzinfo=UTC))
    assert not outcome.done and writer.patches == []
    wave = ScaleUp(KEY, 5, Surge(3, 2, ("EVENT-2",), ("inference/llm-a", "inference/llm-b"), None))
    await executor.apply(wave, datetime(2026, 1, 1, tzinfo=UTC))
    (patch,) = writer.patches
    assert patch["spec"] == {"replicas": 5}
    record = json.loads(patch["metadata"]["annotations"][SURGE_ANNOTATION])
    assert (record["baseReplicas"], record["added"]) == (3, 2)
    assert record["doomedPods"] == ["inference/llm-a", "inference/llm-b"]


class ConflictingWriter(RecordingWriter):
    """The Deployment controller bumps the resourceVersion between our read and our write."""

    def __init__(self, conflicts: int) -> None:
        super().__init__()
        self.conflicts = conflicts
        self.reads = 0

    async def get_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        self.current["metadata"]["resourceVersion"] = str(8 + self.reads)
        return self.current

    async def patch_workload(
        self, kind: str, namespace: str, name: str, patch: dict[str, Any]
    ) -> bool:
        self.patches.append(patch)
        if self.conflicts:
            self.conflicts -= 1
            raise Conflict("the object has been modified", status=409)
        return True


async def test_a_conflict_reads_again_and_writes_with_the_new_version() -> None:
    writer = ConflictingWriter(conflicts=2)
    executor = Executor(writer=writer, events=QuietEvents(), workloads={})  # type: ignore[arg-type]
    outcome = await executor.apply(
        ScaleBack(KEY, 3, Reason.REPLACEMENTS_READY), datetime(2026, 1, 1, tzinfo=UTC)
    )
    assert outcome.done
    assert [p["metadata"]["resourceVersion"] for p in writer.patches] == ["9", "10", "11"]


async def test_conflicts_that_persist_are_left_to_the_next_pass() -> None:
    writer = ConflictingWriter(conflicts=10)
    executor = Executor(writer=writer, events=QuietEvents(), workloads={})  # type: ignore[arg-type]
    with pytest.raises(Conflict):
        await executor.apply(
            ScaleBack(KEY, 3, Reason.REPLACEMENTS_READY), datetime(2026, 1, 1, tzinfo=UTC)
        )
    assert len(writer.patches) == CONFLICT_ATTEMPTS
