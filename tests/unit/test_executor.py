"""The executor checks the fresh object against the plan's basis, writes, retries by one policy,
and rejects with a typed reason; it decides nothing (what to write comes with the action)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from rebalancer.controller.actions import (
    Evict,
    RecordHistory,
    ScaleBack,
    ScaleUp,
    WorkloadBasis,
)
from rebalancer.controller.executor import Executor, HistoryObject
from rebalancer.controller.history import History
from rebalancer.controller.model import WorkloadInfo
from rebalancer.controller.records import Surge
from rebalancer.controller.seal import Sealer, workload_identity
from rebalancer.kube.errors import Conflict, ServerError, TooManyRequests
from rebalancer.names import HISTORY_KEY, SURGE_ANNOTATION
from rebalancer.retry import Backoff, RetryPolicy
from rebalancer.vocabulary import ActionResult, Reason, Rejection

KEY = ("Deployment", "inference", "llm")
SURGE = Surge(3, 1, ("EVENT-1",), ("inference/llm-a",), "2026-01-01T00:00:30Z")
PDB_BODY = {"details": {"causes": [{"reason": "DisruptionBudget", "message": "needs 2"}]}}
SEALER = Sealer(b"k" * 32)


class FakeWriter:
    """Serves the Deployment as the API has it now; records writes; fails the next writes with
    the errors queued in `failures`."""

    def __init__(self, replicas: int = 4, surge: Surge | None = SURGE) -> None:
        self.writes: list[tuple[str, Any]] = []
        self.failures: list[Exception] = []
        self.reads = 0
        annotations = {SURGE_ANNOTATION: surge.to_json()} if surge else {}
        self.current: dict[str, Any] = {
            "metadata": {
                "namespace": "inference", "name": "llm", "uid": "u1", "resourceVersion": "8",
                "annotations": annotations,
            },
            "spec": {"replicas": replicas, "template": {"spec": {"containers": []}}},
            "status": {"readyReplicas": replicas},
        }  # fmt: skip

    def _fail(self) -> None:
        if self.failures:
            raise self.failures.pop(0)

    async def get_workload(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        self.current["metadata"]["resourceVersion"] = str(8 + self.reads)
        return json.loads(json.dumps(self.current))

    async def patch_workload(self, kind: str, ns: str, name: str, patch: dict[str, Any]) -> bool:
        self.writes.append(("patch", patch))
        self._fail()
        return True

    async def evict(self, namespace: str, name: str, body: dict[str, Any]) -> bool:
        self.writes.append(("evict", name))
        self._fail()
        return True

    async def put(self, path: str, body: dict[str, Any]) -> None:
        self.writes.append(("put", body))
        self._fail()

    async def create(self, path: str, body: dict[str, Any]) -> None:
        self.writes.append(("create", body))
        self._fail()


def workload(replicas: int = 4, surge: Surge | None = SURGE) -> WorkloadInfo:
    return WorkloadInfo.from_json("Deployment", FakeWriter(replicas, surge).current)


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def executor(
    writer: FakeWriter, *, fence: bool = True, attempts: int = 3
) -> tuple[Executor, Sleeps]:
    sleeps = Sleeps()
    policy = RetryPolicy(attempts=attempts, max_wait_seconds=2.0, backoff=Backoff(jitter=0))
    return (
        Executor(
            writer,  # type: ignore[arg-type]
            history=HistoryObject("spot-rebalancer", "ctl-history"),
            policy=policy,
            fence=lambda: fence,
            sleep=sleeps,
            sealer=lambda: SEALER,
        ),
        sleeps,
    )


def scale_back(**changes: Any) -> ScaleBack:
    action = ScaleBack(
        KEY, 3, Reason.REPLACEMENTS_READY, replace(SURGE, completed=True),
        basis=WorkloadBasis.of(workload()),
    )  # fmt: skip
    return replace(action, **changes)


async def test_writes_the_planned_patch_with_the_version_just_read() -> None:
    writer = FakeWriter()
    run, _ = executor(writer)
    outcome = await run.apply(scale_back())
    assert outcome.result is ActionResult.APPLIED
    ((_, patch),) = writer.writes
    assert patch["spec"] == {"replicas": 3}
    assert patch["metadata"]["resourceVersion"] == "9"  # read now, not the cache's
    assert json.loads(patch["metadata"]["annotations"][SURGE_ANNOTATION])["completed"] is True


async def test_replicas_changed_since_the_plan_reject_it_as_stale() -> None:
    writer = FakeWriter(replicas=6)  # an HPA scaled it after the plan was made
    run, _ = executor(writer)
    outcome = await run.apply(scale_back())
    assert (outcome.result, outcome.rejection) == (ActionResult.REJECTED, Rejection.STALE)
    assert writer.writes == []


async def test_a_surge_planned_from_a_stale_cache_is_never_applied_twice() -> None:
    writer = FakeWriter(replicas=4)  # the surge for llm-a is on the Deployment already
    run, _ = executor(writer)
    planned_before_it = ScaleUp(
        KEY, replicas=4, record=SURGE, added=1, basis=WorkloadBasis.of(workload(3, None))
    )
    outcome = await run.apply(planned_before_it)
    assert outcome.rejection is Rejection.STALE and writer.writes == []


async def test_a_surge_whose_count_an_hpa_reached_first_still_writes_its_record() -> None:
    """The HPA's minReplicas was raised in the step before the surge and the HPA scaled to it
    before the surge's write: the count is the surge's, nothing else moved, so the record is
    written (without it the next pass would surge again on top)."""
    writer = FakeWriter(replicas=4, surge=None)
    run, _ = executor(writer)
    surge = ScaleUp(
        KEY, replicas=4, record=SURGE, added=1, basis=WorkloadBasis.of(workload(3, None))
    )
    assert (await run.apply(surge)).result is ActionResult.APPLIED
    ((_, patch),) = writer.writes
    assert patch["spec"] == {"replicas": 4}
    written = patch["metadata"]["annotations"][SURGE_ANNOTATION]
    identity = workload_identity(workload(3, None))
    assert SEALER.open(identity, SURGE_ANNOTATION, written) == SURGE.to_json()
    # Reached another count (the HPA went further): stale as ever.
    other = FakeWriter(replicas=5, surge=None)
    run, _ = executor(other)
    assert (await run.apply(surge)).rejection is Rejection.STALE


async def test_a_deleted_and_recreated_workload_is_not_the_one_planned_for() -> None:
    writer = FakeWriter()
    run, _ = executor(writer)
    action = scale_back(basis=replace(WorkloadBasis.of(workload()), uid="old-uid"))
    assert (await run.apply(action)).rejection is Rejection.STALE


async def test_a_conflict_reads_checks_and_writes_again_at_once() -> None:
    writer = FakeWriter()
    writer.failures = [Conflict("modified", status=409), Conflict("modified", status=409)]
    run, sleeps = executor(writer)
    assert (await run.apply(scale_back())).result is ActionResult.APPLIED
    assert [p["metadata"]["resourceVersion"] for _, p in writer.writes] == ["9", "10", "11"]
    assert sleeps.waits == [0.0, 0.0]


async def test_a_write_that_keeps_failing_is_an_error_left_to_the_next_pass() -> None:
    writer = FakeWriter()
    writer.failures = [ServerError("boom", status=500)] * 5
    run, sleeps = executor(writer, attempts=3)
    outcome = await run.apply(scale_back())
    assert (outcome.result, outcome.error_kind) == (ActionResult.ERROR, "server_error")
    assert len(writer.writes) == 3 and len(sleeps.waits) == 2


async def test_retry_after_is_honoured_but_never_beyond_the_cap() -> None:
    writer = FakeWriter()
    writer.failures = [
        TooManyRequests("slow down", status=429, retry_after=1.5),
        TooManyRequests("slow down", status=429, retry_after=60),
    ]
    run, sleeps = executor(writer)
    assert (await run.apply(scale_back())).result is ActionResult.APPLIED
    assert sleeps.waits == [1.5, 2.0]


async def test_a_disruption_budget_refusal_is_not_retried() -> None:
    writer = FakeWriter()
    writer.failures = [TooManyRequests("pdb", status=429, body=PDB_BODY)]
    run, sleeps = executor(writer)
    outcome = await run.apply(Evict(("inference", "llm-a"), "u", "node-1", "E1"))
    assert (outcome.result, outcome.rejection) == (ActionResult.REJECTED, Rejection.BLOCKED)
    assert len(writer.writes) == 1 and sleeps.waits == []


async def test_a_fenced_replica_writes_nothing() -> None:
    writer = FakeWriter()
    run, _ = executor(writer, fence=False)
    assert (await run.apply(scale_back())).rejection is Rejection.FENCED
    assert (await run.apply(Evict(("inference", "a"), "u", "n", "E"))).rejection is Rejection.FENCED
    assert writer.writes == []


@pytest.mark.parametrize(("version", "verb"), [("", "create"), ("41", "put")])
async def test_the_history_is_created_or_replaced_from_the_version_read(
    version: str, verb: str
) -> None:
    writer = FakeWriter()
    run, _ = executor(writer)
    history = History(resource_version=version)
    assert (await run.apply(RecordHistory(history))).result is ActionResult.APPLIED
    ((done, body),) = writer.writes
    assert done == verb
    assert body["metadata"].get("resourceVersion", "") == version
    assert json.loads(body["data"][HISTORY_KEY])["version"] == 1


async def test_a_history_written_by_someone_else_meanwhile_is_not_overwritten() -> None:
    writer = FakeWriter()
    writer.failures = [Conflict("modified", status=409)]
    run, _ = executor(writer)
    outcome = await run.apply(RecordHistory(History(resource_version="41")))
    assert outcome.rejection is Rejection.STALE and len(writer.writes) == 1
