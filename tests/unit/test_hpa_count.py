"""An availability target on a Deployment an HorizontalPodAutoscaler scales: N is the HPA's own
wish, computed from its metrics as upstream does (`hpa_count.py`), and the HPA's bounds hold N
plus the target's replicas (`planning/bounds.py`)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from rebalancer import names
from rebalancer.controller.actions import Bound, SetSpare, Step
from rebalancer.controller.checkup import Check, diagnose, setup_of
from rebalancer.controller.hpa_count import hpa_count
from rebalancer.controller.keda import held_through
from rebalancer.controller.model import ScaledObjectInfo, ScalerInfo, ScalerMetric, WorkloadInfo
from rebalancer.controller.planner import Settings, plan
from rebalancer.controller.records import Spare, Surge
from rebalancer.timefmt import iso
from tests.unit.test_planner import NOW, deployment, of_type, pod, snapshot
from tests.unit.test_target import FRESH, TARGET, WATCHED, three_zone_nodes


def cpu(current: float | None, target: float = 50.0) -> ScalerMetric:
    return ScalerMetric("cpu", target, current)


def scaler(*metrics: ScalerMetric, low: int = 1, high: int = 10, **more: Any) -> ScalerInfo:
    return ScalerInfo(
        "ml", "infer", ("Deployment", "infer"), low, high, None, metrics=metrics, **more
    )


def test_n_is_the_load_in_pods_at_the_target_however_many_replicas_share_it() -> None:
    # 75 % of the request on 4 Ready pods at a target of 50 %: the HPA wants 6.
    assert hpa_count(scaler(cpu(75)), ready=4, record=None, replicas=4, now=NOW).base == 6
    # The same load over 9 (6 and our 3 spares): 33 % each, still 6 (within the tolerance).
    kept = hpa_count(scaler(cpu(33)), ready=9, record=Spare(6, 3), replicas=9, now=NOW)
    assert (kept.base, kept.why) == (6, "the HPA infer wants 6 (cpu 33 of 50: 5.9 pods)")
    # An Object or External AverageValue is a total over the HPA's current replicas: upstream's
    # status says 60 over 9 as 6.667 (rounded up to a thousandth), which is not 7 pods at 10.
    queue = ScalerMetric("External queue", 10.0, 6.667, per_pod=False)
    total = scaler(queue, current_replicas=9)
    assert hpa_count(total, ready=2, record=None, replicas=9, now=NOW).base == 6
    # The highest of the metrics, within the HPA's own bounds (the ones before ours).
    both = replace(scaler(cpu(75), cpu(100)), saved="2,7")
    assert hpa_count(both, ready=4, record=None, replicas=4, now=NOW).base == 7


def test_n_rises_at_once_and_falls_after_the_hpas_scale_down_window() -> None:
    hpa = scaler(cpu(20))  # over 9 Ready: 3.6 pods; the record's N is 6
    record = Spare(6, 3)
    first = hpa_count(hpa, ready=9, record=record, replicas=9, now=NOW)
    assert (first.base, first.lower_since, first.lower_high) == (6, iso(NOW), 4)
    record = replace(record, lower_since=first.lower_since, lower_high=first.lower_high)
    later = NOW + timedelta(seconds=200)
    second = hpa_count(scaler(cpu(25)), ready=9, record=record, replicas=9, now=later)
    assert (second.base, second.lower_high) == (6, 5)  # 4.5 pods: the highest since, 5
    record = replace(record, lower_high=second.lower_high)
    done = hpa_count(hpa, ready=9, record=record, replicas=9, now=NOW + timedelta(seconds=300))
    assert (done.base, done.lower_since) == (5, None)  # the window's highest, not today's 4
    # A rise ends the stretch below at once.
    up = hpa_count(scaler(cpu(50)), ready=9, record=record, replicas=9, now=later)
    assert (up.base, up.lower_since, up.lower_high) == (9, None, 0)
    # An HPA that never scales down (selectPolicy Disabled) keeps N.
    never = scaler(cpu(20), scale_down_window=None)
    assert hpa_count(never, ready=9, record=Spare(6, 3), replicas=9, now=NOW).base == 6


def test_without_every_metrics_value_n_does_not_fall() -> None:
    partial = scaler(cpu(10), cpu(None))
    assert hpa_count(partial, ready=9, record=Spare(6, 3), replicas=9, now=NOW).base == 6
    assert hpa_count(scaler(cpu(None)), ready=9, record=None, replicas=4, now=NOW).base == 4
    # No Ready pod: nothing to average over (upstream has no metric then either).
    assert hpa_count(scaler(cpu(80)), ready=0, record=Spare(6, 3), replicas=9, now=NOW).base == 6


def test_an_hpas_metrics_and_their_values_are_read_from_its_json() -> None:
    hpa = ScalerInfo.from_json(
        {
            "metadata": {"namespace": "ml", "name": "infer"},
            "spec": {
                "scaleTargetRef": {"kind": "Deployment", "name": "infer"},
                "minReplicas": 2,
                "maxReplicas": 8,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "target": {
                        "type": "Utilization", "averageUtilization": 60}}},
                    {"type": "Pods", "pods": {"metric": {"name": "rps"}, "target": {
                        "type": "AverageValue", "averageValue": "500m"}}},
                    {"type": "External", "external": {"metric": {"name": "queue"}, "target": {
                        "type": "AverageValue", "averageValue": "30"}}},
                    {"type": "Object", "object": {"metric": {"name": "lag"}, "target": {
                        "type": "Value", "value": "2k"}}},
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 600}},
            },
            "status": {
                "currentReplicas": 5,
                "currentMetrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "current": {
                        "averageUtilization": 45, "averageValue": "450m"}}},
                    {"type": "Pods", "pods": {"metric": {"name": "rps"}, "current": {
                        "averageValue": "750m"}}},
                    {},  # upstream's status for a metric it could not read
                ],
            },
        }
    )  # fmt: skip
    assert hpa.metrics == (
        ScalerMetric("cpu", 60.0, 45.0),
        ScalerMetric("Pods rps", 0.5, 0.75),
        ScalerMetric("External queue", 30.0, None, per_pod=False),
        ScalerMetric("Object lag", 2000.0, None),
    )
    assert (hpa.current_replicas, hpa.scale_down_window) == (5, 600.0)


def hpa_state(annotations: dict[str, str], hpa: ScalerInfo) -> Any:
    nodes = three_zone_nodes((1, 1, 1), 0)
    pods = [pod(f"p{i}", node["metadata"]["name"]) for i, node in enumerate(nodes)]
    state = snapshot(nodes, pods, [deployment(3, annotations=annotations)], history=FRESH)
    return replace(state, scalers={hpa.key: hpa})


def test_a_target_keeps_its_spares_on_top_of_the_hpas_count_and_holds_them_with_its_bounds() -> (
    None
):
    # The HPA (1 to 5) wants 3: 50 % over 3 Ready at a target of 50 %.
    hpa = scaler(cpu(50), high=5)
    actions = plan(hpa_state(TARGET, hpa), Settings()).actions
    (spare,) = of_type(actions, SetSpare)
    assert (spare.replicas, spare.record) == (9, Spare(3, 6, spot=7, watched_since=WATCHED))
    assert spare.why is not None and spare.why.endswith(
        "the HPA infer wants 3 (cpu 50 of 50: 3.0 pods)"
    )
    # Its bounds hold the 9, raised before the Deployment is scaled; its own are recorded.
    (bound,) = of_type(actions, Bound)
    assert (bound.min_replicas, bound.max_replicas, bound.original) == (9, 9, "1,5")
    assert bound.step == Step.FIRST < spare.step


def test_the_hpas_bounds_go_back_when_the_target_does() -> None:
    record = {names.SPARE_RECORD: Spare(3, 6, spot=7, watched_since=WATCHED).to_json()}
    hpa = replace(scaler(cpu(50), low=9, high=9), original="1,5", saved="1,5")
    actions = plan(hpa_state(record, hpa), Settings()).actions
    (spare,) = of_type(actions, SetSpare)
    assert (spare.replicas, spare.record, spare.why) == (None, None, "")  # the HPA's count now
    (bound,) = of_type(actions, Bound)
    assert (bound.min_replicas, bound.max_replicas, bound.original) == (1, 5, None)


def test_the_hpas_stretches_are_kept_on_the_record_and_read_back_strictly() -> None:
    kept = Spare(6, 3, spot=5, lower_since=iso(NOW), lower_high=4, rising_from=3,
                 rising_since=iso(NOW))  # fmt: skip
    assert Spare.from_json(kept.to_json()) == kept
    for wrong in ({"lowerHigh": 7}, {"risingFrom": 6}, {"risingSince": "yesterday"}):
        text = json.dumps({**json.loads(kept.to_json()), **wrong})
        with pytest.raises(ValueError):
            Spare.from_json(text)


def test_a_rise_is_measured_against_the_count_before_it_for_one_recovery() -> None:
    # The record's N is 3; the HPA now wants 6 (100 % over 3 Ready, Ready long since). The
    # 3 more load: the account measures against the 3 before the rise, not below.
    record = Spare(3, 6, spot=7, watched_since=WATCHED)
    annotations = {**TARGET, names.SPARE_RECORD: record.to_json()}
    state = hpa_state(annotations, scaler(cpu(100)))
    (spare,) = of_type(plan(state, Settings()).actions, SetSpare)
    assert spare.record is not None
    assert (spare.record.base, spare.record.rising_from, spare.record.below_since) == (6, 3, None)
    assert spare.record.rising_since == iso(NOW)
    # One recovery later (360 s) the 3 still missing count: below since then.
    rising = replace(spare.record, added=record.added)
    annotations = {**TARGET, names.SPARE_RECORD: rising.to_json()}
    later = replace(hpa_state(annotations, scaler(cpu(100))), now=NOW + timedelta(seconds=360))
    (after,) = of_type(plan(later, Settings()).actions, SetSpare)
    assert after.record is not None
    assert (after.record.rising_from, after.record.below_since) == (0, iso(later.now))


def keda_hpa(current: float = 50.0) -> ScalerInfo:
    """The HPA KEDA makes for ScaledObject infer (1 to 5), as KEDA writes it: owned by it,
    with the ScaledObject's annotations copied (here none)."""
    return ScalerInfo.from_json(
        {
            "metadata": {"namespace": "ml", "name": "keda-hpa-infer", "ownerReferences": [
                {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": "infer",
                 "uid": "so-uid", "controller": True}]},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "infer"},
                     "minReplicas": 1, "maxReplicas": 5,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                         "type": "Utilization", "averageUtilization": 50}}}]},
            "status": {"currentMetrics": [{"type": "Resource", "resource": {
                "name": "cpu", "current": {"averageUtilization": current}}}]},
        }
    )  # fmt: skip


def scaled_object(**spec: Any) -> ScaledObjectInfo:
    annotations = spec.pop("annotations", {})
    return ScaledObjectInfo.from_json({
        "metadata": {"namespace": "ml", "name": "infer", "uid": "so-uid",
                     "resourceVersion": "7", "annotations": annotations},
        "spec": {"scaleTargetRef": {"name": "infer"}, **spec},
    })  # fmt: skip


def keda_state(annotations: dict[str, str], scaled: ScaledObjectInfo | None) -> Any:
    hpa = keda_hpa()
    joined = held_through({hpa.key: hpa}, {("ml", "infer"): scaled} if scaled else {})
    return replace(hpa_state(annotations, hpa), scalers=joined)


def test_with_keda_the_spares_are_held_by_the_scaledobjects_bounds() -> None:
    # KEDA sets the HPA it owns back from its ScaledObject whenever the HPA changes: the
    # ScaledObject's minReplicaCount and maxReplicaCount hold the spares instead, and KEDA
    # writes them onto its HPA. The same plan as with a plain HPA of 1 to 5 wanting 3 (above).
    actions = plan(keda_state(TARGET, scaled_object(minReplicaCount=1, maxReplicaCount=5)),
                   Settings()).actions  # fmt: skip
    (spare,) = of_type(actions, SetSpare)
    assert (spare.replicas, spare.record) == (9, Spare(3, 6, spot=7, watched_since=WATCHED))
    (bound,) = of_type(actions, Bound)
    assert (bound.through, bound.min_replicas, bound.max_replicas, bound.original) == (
        "infer",
        9,
        9,
        "1,5",
    )
    assert bound.patch()["spec"] == {"minReplicaCount": 9, "maxReplicaCount": 9}
    assert bound.basis == (1, 5, None)  # checked against the fresh ScaledObject before writing
    # Without a maxReplicaCount KEDA's HPA has 100: only the minimum rises.
    actions = plan(keda_state(TARGET, scaled_object(minReplicaCount=2)), Settings()).actions
    (bound,) = of_type(actions, Bound)
    assert (bound.min_replicas, bound.max_replicas, bound.original) == (9, 100, "2,100")
    # The target gone, the ScaledObject's own bounds go back (our record on it, sealed).
    record = {names.SPARE_RECORD: Spare(3, 6, spot=7, watched_since=WATCHED).to_json()}
    raised = scaled_object(minReplicaCount=9, maxReplicaCount=9,
                           annotations={names.HPA_ORIGINAL_ANNOTATION: "1,5"})  # fmt: skip
    actions = plan(keda_state(record, raised), Settings()).actions
    (bound,) = of_type(actions, Bound)
    assert (bound.through, bound.min_replicas, bound.max_replicas, bound.original) == (
        "infer",
        1,
        5,
        None,
    )


def test_an_hpa_an_operator_owns_is_left_alone_where_its_bounds_cannot_hold() -> None:
    # A ScaledObject that scales to zero (minReplicaCount 0, the default, or an idle count)
    # sets the Deployment's count itself when idle, whatever the HPA's bounds; a paused one
    # holds a count of its own; one the controller cannot read (no CRD, no RBAC) leaves the
    # HPA's bounds to KEDA, which sets them back: no spares, no Bound.
    for scaled in (
        scaled_object(),
        scaled_object(minReplicaCount=1, idleReplicaCount=0),
        scaled_object(minReplicaCount=1, annotations={"autoscaling.keda.sh/paused": "true"}),
        scaled_object(minReplicaCount=1, annotations={"autoscaling.keda.sh/paused-replicas": "2"}),
        None,
    ):
        state = keda_state(TARGET, scaled)
        assert of_type(plan(state, Settings()).actions, (SetSpare, Bound)) == [], scaled
    # paused "false" is not paused (KEDA parses the value).
    unpaused = scaled_object(minReplicaCount=1, annotations={"autoscaling.keda.sh/paused": "false"})
    assert unpaused.holdable
    # A record from before the HPA had its owner is dropped, the count left to the HPA.
    record = {**TARGET, names.SPARE_RECORD: Spare(3, 6, spot=7, watched_since=WATCHED).to_json()}
    (dropped,) = of_type(plan(keda_state(record, None), Settings()).actions, SetSpare)
    assert (dropped.replicas, dropped.record) == (None, None)
    # A surge does not raise its bounds either (it ends as SurgeNotHeld if the HPA scales back).
    surged = deployment(3, annotations=TARGET, surge=Surge(3, 1, ("e",), ("ml/p0",), None))
    state = replace(keda_state(TARGET, scaled_object()), workloads={surged.key: surged})
    assert of_type(plan(state, Settings()).actions, Bound) == []
    # Our record on a ScaledObject that has since been set to scale to zero is put back.
    zero = scaled_object(minReplicaCount=0, maxReplicaCount=9,
                         annotations={names.HPA_ORIGINAL_ANNOTATION: "1,5"})  # fmt: skip
    (back,) = of_type(plan(keda_state({}, zero), Settings()).actions, Bound)
    assert (back.through, back.min_replicas, back.max_replicas, back.original) == (
        "infer",
        1,
        5,
        None,
    )
    # A ScaledObject of the same name that is not the HPA's owner (another uid) is not joined.
    other = replace(scaled_object(minReplicaCount=1), uid="another")
    hpa = keda_hpa()
    assert held_through({hpa.key: hpa}, {("ml", "infer"): other})[hpa.key].holder is None


def test_the_doctor_says_why_a_target_on_an_operators_hpa_is_not_acted_on() -> None:
    target = WorkloadInfo.from_json("Deployment", {
        "metadata": {"namespace": "ml", "name": "infer", "annotations": TARGET},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
    })  # fmt: skip

    def said(scaled: ScaledObjectInfo | None) -> list[str]:
        setup = setup_of(keda_state(TARGET, scaled), settings=Settings(), daemonsets=None)
        setup = replace(setup, workloads=(target,))
        return [f.what for f in diagnose(setup) if f.check is Check.TARGET_NOT_ACTED_ON]

    assert said(scaled_object(minReplicaCount=1)) == []  # held through the ScaledObject
    assert said(scaled_object()) == [
        "availability target 99.9 % not acted on: its HPA belongs to ScaledObject infer (HPA "
        "keda-hpa-infer), which scales the Deployment to zero when idle (minReplicaCount 0 or "
        "an idleReplicaCount), whatever the HPA's bounds"
    ]
    assert said(None) == [
        "availability target 99.9 % not acted on: its HPA belongs to ScaledObject infer (HPA "
        "keda-hpa-infer), which the controller cannot read (the keda.sh ScaledObjects are not "
        "listed: the chart's RBAC, or KEDA's CRD), and KEDA sets the HPA's bounds back at once"
    ]


def test_a_hostile_hpa_reads_as_far_as_it_is_sound_and_cannot_push_n_past_its_bounds() -> None:
    cpu = {"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 50}}}  # fmt: skip
    odd: list[Any] = [
        "cpu", 7, {"type": "Pods", "pods": "everything"},
        {"type": "External", "external": {"metric": ["q"], "target": {
            "type": "Value", "value": "-5"}}},
        {"type": "Object", "object": {"metric": {"name": "x" * 10_000}, "target": {
            "type": "Value", "value": "1"}}},
        cpu,
    ]  # fmt: skip
    hpa = ScalerInfo.from_json(
        {
            "metadata": {"namespace": "ml", "name": "infer"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "infer"},
                     "minReplicas": 1, "maxReplicas": 8, "metrics": odd,
                     "behavior": "fast"},
            "status": {"currentReplicas": 3, "currentMetrics": [
                None, {"type": "Pods", "pods": 3}, {}, {},
                {"type": "Object", "object": {"current": {"value": "1e300"}}},
                {"type": "Resource", "resource": {"current": {"averageUtilization": "nan"}}}]},
        }
    )  # fmt: skip
    # What is sound is read: the Object metric (its huge name cut) and cpu (no usable value);
    # the rest left out, the behavior read as the default.
    assert [(m.name[:8], len(m.name), m.current) for m in hpa.metrics] == [
        ("Object x", len("Object ") + 64, 1e300), ("cpu", 3, None),
    ]  # fmt: skip
    assert hpa.scale_down_window == 300.0
    # 1e300 pods' load is the HPA's max, 8; cpu without a value forbids nothing upward.
    counted = hpa_count(hpa, ready=3, record=None, replicas=3, now=NOW)
    assert counted.base == 8
    assert len(counted.why) < 300  # the words name a metric, not its 10 000 characters


def test_a_hostile_scaledobject_reads_as_one_that_cannot_hold_and_raises_nothing() -> None:
    # Any tenant may write its ScaledObject: values of the wrong type or sign read as unset
    # (a minimum of 0: scales to zero, not held), a spec or annotations that are no mapping
    # as none; nothing raises (the cache would skip the object, never stop).
    for spec in (
        {"minReplicaCount": "9"}, {"minReplicaCount": -3}, {"minReplicaCount": 2.0},
        {"minReplicaCount": True}, {"minReplicaCount": None, "maxReplicaCount": "x"},
    ):  # fmt: skip
        assert not scaled_object(**spec).holdable, spec
    odd = ScaledObjectInfo.from_json({"metadata": {"name": "infer", "annotations": ["a"]},
                                      "spec": "everything"})  # fmt: skip
    assert (odd.min_count, odd.max_count, odd.original, odd.holdable) == (0, 100, None, False)
    # A maximum that is no count reads as KEDA's default: the bounds stay sound.
    for high in (-1, 0, "8", 8.0):
        assert scaled_object(minReplicaCount=2, maxReplicaCount=high).hpa_bounds == (2, 100)
