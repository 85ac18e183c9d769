"""The HorizontalPodAutoscaler controller, with upstream's arithmetic, on a stand-in metric.

Objects: `autoscaling/v2` HorizontalPodAutoscalers, served by the API like any resource (a client
reads them and may patch `spec.minReplicas`). Each one is synced every `sync_seconds` (upstream's
`--horizontal-pod-autoscaler-sync-period`, 15 s), first when it is seen. A sync follows
`pkg/controller/podautoscaler/horizontal.go` (`reconcileAutoscaler`) and `replica_calculator.go`:

- `currentReplicas` is the target's `spec.replicas`; 0 with `minReplicas` > 0 disables scaling;
  above `maxReplicas` it is set to the max, below `minReplicas` to the min;
- otherwise the metric gives a recommendation (`calcPlainMetricReplicas`): the usage ratio of
  the Ready pods; within the tolerance (0.1) nothing changes; pods not Ready (a replica loading
  its model) are ignored, and on a scale up counted at 0 % use, as upstream does; a recommendation
  is `ceil(ratio * pods)`;
- then `normalizeDesiredReplicasWithBehaviors`: the stabilization window (the highest
  recommendation of the last `scaleDown.stabilizationWindowSeconds`, 300 s by default, caps a
  scale down; scale up's window is 0), then the rate limits of the default policies (scale up:
  the larger of 4 pods and 100 % per 15 s; scale down: 100 % per 15 s), then min/max.

The simplification is the metric: there is no metrics API. CPU utilisation is a stand-in driven
by the scenario: the annotation `sim.spot-rebalancer.io/cpu-load-percent` on the HPA is the
total CPU use of the workload's Ready pods in percent of one pod's request (150: three pods at
50 %, or two at 75 %); each Ready pod's utilisation is that divided by their number, as if a load
balancer spread the traffic evenly; without the annotation there is no metric, and the HPA
only keeps the replicas within its bounds. Only a `Resource` cpu `Utilization` target is read; other
metric types, container resources and user-defined scaling policies are not modelled.
`rescales` records every change the HPA made, for tests.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from rebalancer_sim import resources as R
from rebalancer_sim.objects import (
    Obj,
    annotation,
    condition_true,
    is_terminating,
    labels_of,
    pod_phase,
)
from rebalancer_sim.scenario import LOAD_ANNOTATION
from rebalancer_sim.selectors import label_selector_object
from rebalancer_sim.store import Store, format_time

TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance
DEFAULT_SCALE_DOWN_WINDOW = 300
POLICY_PERIOD_SECONDS = 15.0
SCALE_UP_PODS = 4
SCALE_UP_PERCENT = 100
SCALE_DOWN_PERCENT = 100
TARGETS = {"Deployment": R.DEPLOYMENTS, "StatefulSet": R.STATEFULSETS}


@dataclass
class _State:
    next_sync: float = 0.0
    recommendations: list[tuple[float, int]] = field(default_factory=list)  # (time, replicas)
    scale_events: list[tuple[float, int]] = field(default_factory=list)  # (time, +n / -n)


@dataclass(frozen=True)
class Rescale:
    at: float
    namespace: str
    name: str
    old: int
    new: int
    reason: str


class HorizontalPodAutoscalers:
    def __init__(self, store: Store, *, sync_seconds: float = 15.0, tolerance: float = TOLERANCE):
        self.store = store
        self.sync_seconds = sync_seconds
        self.tolerance = tolerance
        self._state: dict[tuple[str, str], _State] = {}
        self.rescales: list[Rescale] = []

    def reconcile(self) -> int:
        now = self.store.clock.now().timestamp()
        worked = 0
        seen = set()
        for hpa in list(self.store.items(R.HPAS)):
            key = (hpa["metadata"]["namespace"], hpa["metadata"]["name"])
            seen.add(key)
            state = self._state.setdefault(key, _State(next_sync=now))
            if now + 1e-9 < state.next_sync:
                continue
            state.next_sync = now + self.sync_seconds
            worked += self._sync(hpa, state, now)
        for key in set(self._state) - seen:
            del self._state[key]
        return worked

    # ---- one sync ----------------------------------------------------------------------------

    def _sync(self, hpa: Obj, state: _State, now: float) -> int:
        namespace = hpa["metadata"]["namespace"]
        spec = hpa.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        resource = TARGETS.get(str(ref.get("kind")))
        target = (
            None if resource is None else self.store.get(resource, namespace, str(ref.get("name")))
        )
        if target is None or resource is None:
            return 0
        current = int((target.get("spec") or {}).get("replicas", 1))
        min_replicas = int(spec.get("minReplicas", 1))
        max_replicas = int(spec["maxReplicas"])
        utilization: int | None = None
        if current == 0 and min_replicas != 0:
            desired, reason = 0, "ScalingDisabled"
            rescale = False
        elif current > max_replicas:
            desired, reason, rescale = (
                max_replicas,
                "Current number of replicas above Spec.MaxReplicas",
                True,
            )
        elif current < min_replicas:
            desired, reason, rescale = (
                min_replicas,
                "Current number of replicas below Spec.MinReplicas",
                True,
            )
        else:
            metric = self._metric_replicas(hpa, target, current)
            if metric is None:
                self._write_status(hpa, current, current, None, now, able=False)
                return 0
            recommended, utilization = metric
            desired = self._normalize(
                spec, state, now, current=current, recommended=recommended, minimum=min_replicas
            )
            reason = "cpu resource utilization (percentage of request) above/below target"
            rescale = desired != current
        if rescale and desired != current:
            updated = json.loads(json.dumps(target))
            updated["spec"]["replicas"] = desired
            self.store.update(resource, updated)
            state.scale_events.append((now, desired - current))
            self.rescales.append(
                Rescale(now, namespace, hpa["metadata"]["name"], current, desired, reason)
            )
        self._write_status(hpa, current, desired, utilization, now, able=True, rescaled=rescale)
        return 1 if rescale else 0

    def _metric_replicas(self, hpa: Obj, target: Obj, current: int) -> tuple[int, int] | None:
        """`calcPlainMetricReplicas` on the stand-in metric: (replicas, utilisation %)."""
        goal = _cpu_target(hpa)
        if goal is None:
            return None
        selector = label_selector_object((target.get("spec") or {}).get("selector"))
        ready = 0
        ignored = 0
        for pod in self.store.items(R.PODS, hpa["metadata"]["namespace"]):
            if is_terminating(pod) or pod_phase(pod) == "Failed" or not selector(labels_of(pod)):
                continue
            if condition_true(pod, "Ready"):
                ready += 1
            else:
                ignored += 1  # pending or loading: no usable sample (upstream's unready pods)
        if ready == 0:
            return None  # upstream: "did not receive metrics for targeted pods"
        value = annotation(hpa, LOAD_ANNOTATION)
        try:
            load = float(value) if value is not None else None
        except ValueError:
            load = None
        if load is None:
            return None  # no metric at all: upstream does not scale on metrics it lacks
        utilization = load / ready
        ratio = utilization / goal
        if not (ignored and ratio > 1.0):
            if abs(1.0 - ratio) <= self.tolerance:
                return current, round(utilization)
            return math.ceil(ratio * ready), round(utilization)
        # Scale up with pods not Ready: they count as using nothing.
        new_ratio = load / ((ready + ignored) * goal)
        if abs(1.0 - new_ratio) <= self.tolerance or new_ratio < 1.0:
            return current, round(utilization)
        replicas = math.ceil(new_ratio * (ready + ignored))
        return (current if replicas < current else replicas), round(utilization)

    def _normalize(
        self, spec: Obj, state: _State, now: float, *, current: int, recommended: int, minimum: int
    ) -> int:
        """`normalizeDesiredReplicasWithBehaviors`: stabilize, then limit the rate, then bound."""
        behavior = spec.get("behavior") or {}
        down_window = (behavior.get("scaleDown") or {}).get("stabilizationWindowSeconds")
        down_window = DEFAULT_SCALE_DOWN_WINDOW if down_window is None else int(down_window)
        up_window = int((behavior.get("scaleUp") or {}).get("stabilizationWindowSeconds") or 0)
        up_recommendation = recommended
        down_recommendation = recommended
        for at, value in state.recommendations:
            if at > now - up_window:
                up_recommendation = min(up_recommendation, value)
            if at > now - down_window:
                down_recommendation = max(down_recommendation, value)
        stabilized = max(current, up_recommendation)
        stabilized = min(stabilized, down_recommendation)
        keep = max(up_window, down_window)
        state.recommendations = [(t, v) for t, v in state.recommendations if t > now - keep]
        state.recommendations.append((now, recommended))
        maximum = int(spec["maxReplicas"])
        added = sum(n for t, n in state.scale_events if n > 0 and t > now - POLICY_PERIOD_SECONDS)
        removed = -sum(
            n for t, n in state.scale_events if n < 0 and t > now - POLICY_PERIOD_SECONDS
        )
        state.scale_events = [e for e in state.scale_events if e[0] > now - POLICY_PERIOD_SECONDS]
        period_start = current - added + removed
        if stabilized > current:
            limit = max(
                period_start + SCALE_UP_PODS,
                math.ceil(period_start * (1 + SCALE_UP_PERCENT / 100)),
            )
            allowed = min(maximum, max(limit, current))
            return min(stabilized, allowed)
        if stabilized < current:
            limit = int(period_start * (1 - SCALE_DOWN_PERCENT / 100))
            allowed = max(minimum, min(limit, current))
            return max(stabilized, allowed)
        return stabilized

    def _write_status(
        self,
        hpa: Obj,
        current: int,
        desired: int,
        utilization: int | None,
        now: float,
        *,
        able: bool,
        rescaled: bool = False,
    ) -> None:
        moment = format_time(self.store.clock.now())
        old = hpa.get("status") or {}
        status: Obj = {
            "observedGeneration": hpa["metadata"].get("generation", 1),
            "currentReplicas": current,
            "desiredReplicas": desired,
        }
        last = moment if rescaled else old.get("lastScaleTime")
        if last:
            status["lastScaleTime"] = last
        if utilization is not None:
            status["currentMetrics"] = [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "current": {"averageUtilization": utilization}},
                }
            ]
        status["conditions"] = [
            {
                "type": "ScalingActive",
                "status": "True" if able else "False",
                "reason": "ValidMetricFound" if able else "FailedGetResourceMetric",
                "lastTransitionTime": moment,
            }
        ]

        def comparable(value: Obj) -> Obj:
            conditions = [c.get("status") for c in value.get("conditions") or []]
            return {**{k: v for k, v in value.items() if k != "conditions"}, "c": conditions}

        if comparable(status) != comparable(old):  # transition times alone are no change
            self.store.update(R.HPAS, dict(hpa, status=status))


def _cpu_target(hpa: Obj) -> float | None:
    for metric in (hpa.get("spec") or {}).get("metrics") or []:
        resource = metric.get("resource") or {}
        target = resource.get("target") or {}
        if (
            metric.get("type") == "Resource"
            and resource.get("name") == "cpu"
            and target.get("averageUtilization")
        ):
            return float(target["averageUtilization"])
    return None
