"""The whole controller against the emulator on virtual time: the writes it makes, in order.

Each scenario states what it makes unavoidable (a 30 s notice, a 10 s model load, a PDB that
allows nothing) and checks the controller's writes against that, not against what it printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import timedelta
from typing import Any

import pytest

from rebalancer import names
from rebalancer.controller.planner import preempts_last_hour
from rebalancer.kube.errors import TooManyRequests
from rebalancer.timefmt import iso
from rebalancer_sim import resources as R
from tests.loop.emulated import connect, ready
from tests.loop.rig import (
    CLOCK,
    EVENT,
    NAMESPACE,
    Emulated,
    annotations,
    azure_takes,
    cancel,
    cluster,
    drained,
    preempt,
    replicas,
    replicaset_scales,
    replicaset_scales_down,
    running,
    until,
    vm_goes_at_cordon,
)
from tests.tap import Request

pytestmark = pytest.mark.looptime


def first(writes: list[Request], predicate: object) -> Request:
    found = [w for w in writes if predicate(w)]  # type: ignore[operator]
    assert found, "expected write not made"
    return found[0]


def refused(em: Emulated, resource: str) -> list[Request]:
    return em.tap.refused(resource)


def replicas_written(em: Emulated) -> list[int | None]:
    return [(w.body.get("spec") or {}).get("replicas") for w in em.written("PATCH", "deployments")]


async def fail_over(em: Emulated, *, load_seconds: float) -> None:
    """After the surge: the ReplicaSet adds llm-d on od-1, which loads its model."""
    await until(lambda: replicas(em) == 4, within=5, what="the surge")
    replicaset_scales(em, new_pod="llm-d", on="od-1", load_seconds=load_seconds)
    await until(
        lambda: ready(em.get("pods", "ml", "llm-d")), within=load_seconds + 1, what="llm-d loaded"
    )


async def test_a_notice_is_cordoned_surged_replaced_and_drained_before_its_deadline() -> None:
    async with cluster() as em, running(em) as controller:
        await until(lambda: controller.elector.is_leader, within=10, what="leading")
        await asyncio.sleep(5)  # the replicas have run for a while when the notice comes
        noticed_at = CLOCK.monotonic()
        not_before = preempt(em, "spot-0", seconds=30)
        await fail_over(em, load_seconds=10)
        await until(lambda: replicas(em) == 3, within=10, what="the scale-back")
        assert replicaset_scales_down(em) == "llm-a"  # the doomed pod, not the replacement
        await until(lambda: drained(em, "spot-0"), within=5, what="the drained mark")
    writes = em.written()
    cordon = first(writes, lambda w: w.resource == "nodes" and w.name == "spot-0")
    surge = first(writes, lambda w: w.resource == "deployments")
    lowered = first(
        writes,
        lambda w: w.resource == "pods" and names.DELETION_COST in str(w.body),
    )
    marked = first(
        writes,
        lambda w: (
            w.name == "spot-0" and names.DRAINED_FOR_ANNOTATION in str(w.body.get("metadata") or {})
        ),
    )
    assert cordon.at <= surge.at < lowered.at < marked.at
    # Lowered only once the replacement was Ready (10 s of loading after the surge).
    assert lowered.at - surge.at >= 10
    # Surged once, scaled back once, the record dropped once its doomed pod was gone.
    assert replicas_written(em) == [4, 3, None]
    # Drained before Azure may take the VM.
    assert CLOCK.now() - timedelta(seconds=CLOCK.monotonic() - marked.at) < not_before
    # The notice is in the history, and the rest of the pool is steered away from.
    history = em.get("configmaps", "spot-rebalancer", "ctl-history")
    assert EVENT in history["data"][names.HISTORY_KEY]
    assert names.COOLDOWN_UNTIL in annotations(em, "nodes", "", "spot-2")
    # Nothing evicted: the doomed pod went by the scale-back. The ReplicaSet deleted it with
    # its 30 s grace, which would end after the deadline: the one DELETE cuts it to fit (a
    # second delete may shorten a grace, never lengthen it). The fake API this test ran on
    # before removed a deleted pod at once, so it never showed.
    assert em.written("POST", "pods/eviction") == []
    (shortened,) = em.written("DELETE", "pods")
    assert shortened.name == "llm-a"
    assert shortened.at + shortened.body["gracePeriodSeconds"] <= noticed_at + 30
    # Where the replacement went, and what else there was, said on the Deployment.
    (placed,) = [
        w.body["message"]
        for w in em.written("POST", "events")
        if w.body["reason"] == "SpotRebalancerReplacementPlaced"
    ]
    assert "llm-d scheduled on od-1 (on-demand pool gpuondemand" in placed
    assert "on-demand pools that fit: gpuondemand" in placed
    assert "spot pools with room: gpuspot" in placed  # spot-2 was free
    assert "being evicted (avoided): gpuspot" in placed
    # The doomed pod was held against others' evictions while the replacement loaded, then let go.
    held = first(writes, lambda w: w.resource == "poddisruptionbudgets" and w.method == "POST")
    released = first(
        writes, lambda w: w.resource == "poddisruptionbudgets" and w.method == "DELETE"
    )
    assert surge.at <= held.at < lowered.at < released.at
    assert held.body["spec"] == {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "llm"}}}
    assert held.body["metadata"]["labels"][names.HOLD_LABEL] == "llm"


def sample(controller: object, name: str, **labels: str) -> float | None:
    registry = controller.metrics.registry  # type: ignore[attr-defined]
    value: float | None = registry.get_sample_value(name, labels)
    return value


async def test_fail_over_latency_is_per_pool_and_a_blocked_one_names_the_workload() -> None:
    """The surge from gpuspot's spot-0 becomes Ready after the 10 s load: one observation under
    pool gpuspot. Then the owner sets replicas back during a second surge: a SurgeNotHeld counted
    against ml/llm, whose series existed at zero before (rate() sees the first one)."""
    async with cluster() as em, running(em) as controller:
        await until(lambda: controller.elector.is_leader, within=10, what="leading")
        await asyncio.sleep(2)
        blocked = "rebalancer_controller_failovers_blocked_total"
        for reason in ("NoCompatibleOnDemandPool", "SurgeNotHeld"):
            assert sample(controller, blocked, workload="ml/llm", reason=reason) == 0
        ready = "rebalancer_controller_notice_to_replacement_ready_seconds"
        assert sample(controller, f"{ready}_count", pool="gpuspot") == 0
        t0 = CLOCK.monotonic()
        preempt(em, "spot-0", seconds=30)
        await fail_over(em, load_seconds=10)
        await until(lambda: replicas(em) == 3, within=10, what="the scale-back")
        took = CLOCK.monotonic() - t0
        assert sample(controller, f"{ready}_count", pool="gpuspot") == 1
        latency = sample(controller, f"{ready}_sum", pool="gpuspot")
        assert latency is not None and 10 <= latency <= took
        preempt(em, "spot-1", seconds=60, event_id="0C6BF4BA-0000-4000-8000-000000000002")
        await until(lambda: replicas(em) == 4, within=5, what="the second surge")
        em.edit("deployments", "ml", "llm", lambda d: d["spec"].update(replicas=3))
        await until(
            lambda: sample(controller, blocked, workload="ml/llm", reason="SurgeNotHeld") == 1,
            within=5,
            what="the blocked fail-over counted",
        )


async def test_a_cancelled_notice_leaves_nothing_of_ours() -> None:
    async with cluster() as em, running(em) as controller:
        await until(lambda: controller.elector.is_leader, within=10, what="leading")
        preempt(em, "spot-0", seconds=30)
        await until(lambda: replicas(em) == 4, within=5, what="the surge")
        cancel(em, "spot-0")
        await until(
            lambda: (
                replicas(em) == 3
                and names.SURGE_ANNOTATION not in annotations(em, "deployments", "ml", "llm")
                and names.CORDONED_FOR not in annotations(em, "nodes", "", "spot-0")
            ),
            within=10,
            what="the surge and the cordon undone",
        )
    spot0 = em.get("nodes", "", "spot-0")
    assert not spot0["spec"].get("unschedulable")
    assert [t["key"] for t in spot0["spec"]["taints"]] == ["kubernetes.azure.com/scalesetpriority"]
    # The doomed replica was never touched: nothing evicted, deleted or re-costed.
    assert [w for w in em.written() if w.resource.startswith("pods")] == []
    held = em.written("POST", "poddisruptionbudgets")
    released = em.written("DELETE", "poddisruptionbudgets")
    assert len(held) == len(released) == 1  # held while the notice stood, let go when it went
    assert list(em.store.items(R.PDBS)) == []


async def test_a_new_leader_keeps_the_quiet_time_of_the_preempt_before_it() -> None:
    """The quiet time before a return to spot counts from the Preempt, which the old leader saw
    and wrote into the history; a new leader that counted from its own start would wait 30 s
    longer."""
    async with cluster() as em:
        quick = {"cooldown_seconds": 60.0, "return_quiet_seconds": 120.0}
        async with running(em, "ctl-a", **quick) as first_leader:
            await until(lambda: first_leader.elector.is_leader, within=10, what="leading")
            t0 = CLOCK.monotonic()
            preempt(em, "spot-0", seconds=30)
            await fail_over(em, load_seconds=5)
            await until(lambda: replicas(em) == 3, within=10, what="the scale-back")
            replicaset_scales_down(em)
        await asyncio.sleep(t0 + 30 - CLOCK.monotonic())
        azure_takes(em, "spot-0")
        async with running(em, "ctl-b", **quick) as second_leader:
            await until(lambda: second_leader.elector.is_leader, within=20, what="the takeover")
            assert second_leader.snapshot().history.known() == {("spot-0", EVENT)}
            await until(
                lambda: names.RETURN_ANNOTATION in annotations(em, "deployments", "ml", "llm"),
                within=200,
                what="a return to spot",
            )
            started = em.written("PATCH", "deployments")[-1].at
    # 120 s after the Preempt as published (whole seconds: up to 1 s before t0); B took over at
    # t0 + 30 and, counting from its own start, would have waited until t0 + 150.
    assert 119 <= started - t0 < 125
    # One surge over both leaders.
    assert replicas_written(em).count(4) == 2  # the surge, then the return's extra replica
    assert replicas_written(em)[0] == 4


async def test_a_new_leader_counts_the_preempts_its_predecessor_saw() -> None:
    async with cluster() as em:
        async with running(em, "ctl-a") as first_leader:
            await until(lambda: first_leader.elector.is_leader, within=10, what="leading")
            preempt(em, "spot-0", seconds=30)
            await until(lambda: replicas(em) == 4, within=5, what="the surge")
            await until(
                lambda: (
                    names.HISTORY_KEY
                    in (em.find("configmaps", NAMESPACE, "ctl-history") or {}).get("data", {})
                ),
                within=5,
                what="the history written",
            )
        await asyncio.sleep(30)
        async with running(em, "ctl-b") as second_leader:
            await until(lambda: second_leader.elector.is_leader, within=20, what="the takeover")
            seen = CLOCK.now()
            preempt(em, "spot-1", seconds=30, event_id="B0000000-0000-0000-0000-000000000002")
            expected = iso(seen + timedelta(seconds=2 * 600))  # two Preempts in the last hour
            await until(
                lambda: (
                    annotations(em, "nodes", "", "spot-2").get(names.COOLDOWN_UNTIL) == expected
                ),
                within=5,
                what=f"spot-2 cooling down until {expected}",
            )
            assert preempts_last_hour(second_leader.snapshot(), "gpuspot", "eastus-1") == 2


async def test_a_conflict_storm_surges_once() -> None:
    async with cluster() as em:
        em.tap.fail("PATCH", "/deployments/llm", 409, times=5, message="modified")
        em.tap.fail("PATCH", "/nodes/spot-0", 409, times=2, message="modified")
        async with running(em) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            preempt(em, "spot-0", seconds=30)
            await until(lambda: replicas(em) == 4, within=10, what="the surge, after the storm")
            await asyncio.sleep(3)
    assert replicas_written(em) == [4]  # five 409s, then one surge: never 5
    assert len(refused(em, "deployments")) == 5
    assert annotations(em, "nodes", "", "spot-0")[names.CORDONED_FOR] == EVENT


async def test_a_server_error_burst_is_retried_and_loses_nothing() -> None:
    async with cluster() as em:
        for path in ("/nodes/spot-0", "/deployments/llm"):
            em.tap.fail("PATCH", path, 500, times=4, message="etcd leader changed")
        async with running(em) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            preempt(em, "spot-0", seconds=30)
            await until(
                lambda: (
                    replicas(em) == 4
                    and names.CORDONED_FOR in annotations(em, "nodes", "", "spot-0")
                ),
                within=15,
                what="cordon and surge after the burst",
            )
            await asyncio.sleep(3)
    assert replicas_written(em) == [4]
    assert len(refused(em, "deployments")) == 4


def guarded_cache(em: Emulated) -> str:
    """A StatefulSet's one pod on spot-0, under its owner's PodDisruptionBudget (minAvailable 1:
    no disruption allowed); returns the pod's uid."""
    cache = em.put(
        "pods",
        {
            "metadata": {
                "namespace": "cache", "name": "cache-0", "annotations": {},
                "labels": {"app": "cache"},
                "ownerReferences": [{"kind": "StatefulSet", "name": "cache", "controller": True}],
            },
            "spec": {"nodeName": "spot-0", "terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "c"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        },
    )  # fmt: skip
    em.put(
        "poddisruptionbudgets",
        {
            "metadata": {"namespace": "cache", "name": "cache"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "cache"}}},
        },
    )
    return str(cache["metadata"]["uid"])


async def test_a_pdb_that_allows_nothing_is_asked_again_then_overridden_at_the_deadline() -> None:
    async with cluster() as em:
        uid = guarded_cache(em)
        async with running(em) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            t0 = CLOCK.monotonic()
            not_before = preempt(em, "spot-0", seconds=30)
            await until(lambda: em.find("pods", "cache", "cache-0") is None, within=40, what="gone")
            deleted = em.written("DELETE", "pods")[0]
            await until(lambda: drained(em, "spot-0"), within=5, what="the drained mark")
            drained_at = CLOCK.now()
    evictions = refused(em, "pods/eviction")
    assert evictions and all(w.status == 429 for w in evictions)
    assert drained_at < not_before
    # Deleted when the deadline minus the 5 s margin came, with a grace that fits what is left.
    assert 25 <= deleted.at - t0 < 27
    assert deleted.body["gracePeriodSeconds"] <= 30 - (deleted.at - t0)
    warnings = [
        w
        for w in em.written("POST", "events")
        if w.body["reason"] == "SpotRebalancerEvictionBlocked"
    ]
    assert len(warnings) == 1 and warnings[0].body["involvedObject"]["uid"] == uid


async def test_an_owner_that_sets_replicas_back_is_not_fought_and_the_node_drains_early() -> None:
    """An operator owns the Deployment and sets `spec.replicas` back to 3 every 10 s. The surge
    cannot be held; fighting it would flap. The controller lets go once, says so, and evicts
    the doomed pod at once, so its replacement starts loading now instead of at the deadline."""
    async with cluster() as em:

        async def owner() -> None:
            while True:
                await asyncio.sleep(10)
                if replicas(em) != 3:
                    em.edit("deployments", "ml", "llm", lambda d: d["spec"].update(replicas=3))

        async with running(em) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            resetting = asyncio.create_task(owner())
            try:
                t0 = CLOCK.monotonic()
                preempt(em, "spot-0", seconds=60)
                await until(lambda: replicas(em) == 4, within=5, what="the surge")
                await until(
                    lambda: em.written("POST", "pods/eviction"),
                    within=15,
                    what="the early eviction",
                )
                evicted = em.written("POST", "pods/eviction")[0]
                await asyncio.sleep(20)  # two more resets: nothing more from the controller
            finally:
                resetting.cancel()
    assert evicted.name == "llm-a"
    assert evicted.at - t0 < 12  # at the first reset, not at the deadline (55 s)
    assert replicas_written(em).count(4) == 1  # surged once, never again against the owner
    warnings = [w.body["reason"] for w in em.written("POST", "events")]
    assert warnings.count("SpotRebalancerSurgeNotHeld") == 1
    records = [
        (w.body["metadata"]["annotations"] or {}).get(names.SURGE_ANNOTATION)
        for w in em.written("PATCH", "deployments")
    ]
    assert any(r and json.loads(r)["reverted"] for r in records), records


async def test_aks_node_auto_drain_waits_for_the_replacement_while_the_pod_is_held() -> None:
    """AKS node auto-drain evicts the doomed replica at notice time, through the Eviction API.
    While its replacement loads (20 s), the hold (a PodDisruptionBudget of ours) refuses that
    eviction, so three replicas stay Ready; then the replacement is Ready, the hold goes, and the
    node is drained well before its deadline."""
    async with cluster() as em:
        refused: list[float] = []

        async def aks_auto_drain() -> None:
            client = await connect(em, "aks-auto-drain")
            try:
                while em.find("pods", "ml", "llm-a") is not None:
                    try:
                        await client.request(
                            "POST",
                            "/api/v1/namespaces/ml/pods/llm-a/eviction",
                            body={"deleteOptions": {}},
                        )
                    except TooManyRequests:
                        refused.append(CLOCK.monotonic())
                    await asyncio.sleep(5)  # it retries, as kubectl drain does
            finally:
                await client.close()

        async with running(em) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            t0 = CLOCK.monotonic()
            preempt(em, "spot-0", seconds=30)
            await until(lambda: replicas(em) == 4, within=5, what="the surge")
            draining = asyncio.create_task(aks_auto_drain())
            replicaset_scales(em, new_pod="llm-d", on="od-1", load_seconds=20)
            await asyncio.sleep(19.9)  # the model loads
            ready_while_loading = sum(1 for p in em.store.items(R.PODS) if ready(p))
            await until(
                lambda: em.find("pods", "ml", "llm-a") is None, within=15, what="llm-a gone"
            )
            draining.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await draining
            gone = CLOCK.monotonic()
    assert ready_while_loading == 3  # the doomed replica served until its replacement was Ready
    assert refused and refused[0] - t0 < 2  # auto-drain tried at once and was held
    assert 20 <= gone - t0 < 30  # gone after the load, before the deadline


async def test_an_hpa_keeps_the_surge_while_replacements_load_and_gets_its_bounds_back() -> None:
    """An HPA (min 3, max 3, wanting 3) owns llm's replicas and syncs every 15 s. Left alone it
    would set the surge back within 15 s and the ReplicaSet would remove the loading replacement.
    Its bounds are raised to 4 for the surge (the originals recorded on it) and put back after;
    the surge holds through a 40 s load without a single reset."""
    async with cluster() as em:
        em.put(
            "horizontalpodautoscalers",
            {
                "metadata": {"namespace": "ml", "name": "llm", "annotations": {}},
                "spec": {
                    "scaleTargetRef": {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": "llm",
                    },
                    "minReplicas": 3,
                    "maxReplicas": 3,
                },
            },
        )
        resets: list[float] = []

        async def hpa_controller() -> None:
            while True:
                await asyncio.sleep(15)
                spec = em.get("horizontalpodautoscalers", "ml", "llm")["spec"]
                wanted = min(max(3, spec["minReplicas"]), spec["maxReplicas"])
                if replicas(em) != wanted:
                    resets.append(CLOCK.monotonic())
                    em.edit(
                        "deployments", "ml", "llm", lambda d, n=wanted: d["spec"].update(replicas=n)
                    )

        async with running(em) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            scaling = asyncio.create_task(hpa_controller())
            try:
                preempt(em, "spot-0", seconds=60)
                await fail_over(em, load_seconds=40)
                await until(lambda: replicas(em) == 3, within=10, what="the scale-back")
                replicaset_scales_down(em)
                await until(
                    lambda: (
                        names.HPA_ORIGINAL_ANNOTATION
                        not in annotations(em, "horizontalpodautoscalers", "ml", "llm")
                    ),
                    within=10,
                    what="the HPA's bounds put back",
                )
            finally:
                scaling.cancel()
    spec = em.get("horizontalpodautoscalers", "ml", "llm")["spec"]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (3, 3)
    raised = [w.body for w in em.written("PATCH", "horizontalpodautoscalers")]
    assert raised[0]["spec"] == {"minReplicas": 4, "maxReplicas": 4}
    saved = raised[0]["metadata"]["annotations"][names.HPA_ORIGINAL_ANNOTATION]
    assert saved.startswith("3,3 seal=")  # sealed: nobody else can write bounds to put back
    assert resets == []  # the HPA never set the surge back
    # The bounds went up before the surge: an HPA sync between the two writes finds min 4.
    order = [
        w.resource
        for w in em.written("PATCH")
        if w.resource in ("horizontalpodautoscalers", "deployments")
    ]
    assert order[:2] == ["horizontalpodautoscalers", "deployments"], order
    warnings = [w.body["reason"] for w in em.written("POST", "events")]
    assert "SpotRebalancerSurgeNotHeld" not in warnings


async def test_a_placement_policy_is_recorded_and_an_invalid_edit_warned_once_and_not_obeyed() -> (
    None
):
    async with cluster() as em:
        em.edit(
            "deployments", "ml", "llm",
            lambda d: d["metadata"].setdefault("annotations", {}).update(
                {names.MIN_ON_DEMAND: "1", names.MAX_RISK: "low"}
            ),
        )  # fmt: skip
        async with running(em) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            await until(
                lambda: names.POLICY_IN_FORCE in annotations(em, "deployments", "ml", "llm"),
                within=5,
                what="the policy recorded",
            )
            recorded = annotations(em, "deployments", "ml", "llm")[names.POLICY_IN_FORCE]
            em.edit(
                "deployments", "ml", "llm",
                lambda d: d["metadata"]["annotations"].update({names.MAX_RISK: "extreme"}),
            )  # fmt: skip
            await asyncio.sleep(10)  # ten passes and more
    assert json.loads(recorded)["min_on_demand"] == 1
    assert annotations(em, "deployments", "ml", "llm")[names.POLICY_IN_FORCE] == recorded
    warnings = [
        w.body
        for w in em.written("POST", "events")
        if w.body["reason"] == "SpotRebalancerPolicyRefused"
    ]
    assert len(warnings) == 1
    assert names.MAX_RISK in warnings[0]["message"] and warnings[0]["type"] == "Warning"
    assert warnings[0]["involvedObject"]["name"] == "llm"


def missed(controller: object, pool: str) -> dict[str, float]:
    counter = controller.metrics.drain_missed_deadline  # type: ignore[attr-defined]
    return {
        reason: counter.labels(pool, reason)._value.get()
        for reason in ("late_notice", "eviction_blocked", "pods_terminating", "pods_left", "other")
    }


@pytest.mark.parametrize("why", ["late_notice", "eviction_blocked"])
async def test_a_missed_deadline_is_counted_with_its_reason(why: str) -> None:
    """The VM goes while the node is cordoned and not drained: with 3 s of notice (less than
    the 5 s drain margin) the notice came too late; with 30 s and a StatefulSet pod whose
    PodDisruptionBudget refuses its eviction, the eviction was blocked."""
    async with cluster() as em:
        if why == "eviction_blocked":
            guarded_cache(em)
        pool = em.get("nodes", "", "spot-0")["metadata"]["labels"][names.AKS_AGENTPOOL_LABEL]
        async with running(em) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            if why == "late_notice":
                # The VM goes the moment the node is cordoned: 3 s were never enough to drain it.
                vm_goes_at_cordon(em, "spot-0")
                preempt(em, "spot-0", seconds=3)
            else:
                preempt(em, "spot-0", seconds=30)
                await until(lambda: refused(em, "pods/eviction"), within=5, what="a refusal")
                azure_takes(em, "spot-0")
            await until(
                lambda: sum(missed(controller, pool).values()) > 0, within=5, what="counted"
            )
            await asyncio.sleep(3)
            counts = missed(controller, pool)
    assert counts == {reason: 1.0 if reason == why else 0.0 for reason in counts}


class SlowScale:
    """The controller's client, with the surge's write to the Deployment taking `seconds` to be
    answered: `sent` is set the moment it leaves, as a stop might come then."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.sent = seconds, asyncio.Event()
        self.client: Any = None

    def __call__(self, client: Any) -> SlowScale:
        self.client = client
        return self

    async def request(self, method: str, path: str, **options: Any) -> Any:
        if method == "PATCH" and "/deployments/" in path:
            self.sent.set()
            await asyncio.sleep(self.seconds)
        return await self.client.request(method, path, **options)

    def stream(self, path: str, **options: Any) -> Any:
        return self.client.stream(path, **options)

    async def close(self) -> None:
        pass


async def test_a_stop_while_the_surge_is_on_its_way_still_records_it_then_releases() -> None:
    # SIGTERM (a rolling update of the controller) lands while the surge's write is in flight:
    # the write is seen through, its Event written, and only then is the Lease given up. Before,
    # the pass was cancelled under the write: the surge happened and nobody recorded it.
    async with cluster() as em:
        slow = SlowScale(seconds=0.8)
        async with running(em, client=slow) as controller:
            await until(lambda: controller.elector.is_leader, within=10, what="leading")
            preempt(em, "spot-0", seconds=30)
            await asyncio.wait_for(slow.sent.wait(), timeout=10)
    assert replicas_written(em) == [4]
    (surge,) = em.written("PATCH", "deployments")
    (recorded,) = [
        w for w in em.written("POST", "events") if w.body["reason"] == "SpotRebalancerSurge"
    ]
    released = [w for w in em.written(resource="leases") if not w.body["spec"]["holderIdentity"]]
    order = em.tap.requests.index
    assert released and order(surge) < order(recorded) and order(surge) < order(released[0])
