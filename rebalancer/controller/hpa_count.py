"""The count an HorizontalPodAutoscaler wants for a Deployment with an availability target. Pure.

A target keeps spares on top of the owner's count N; with an HPA, the HPA is the owner. While we
hold its minReplicas at N + spares its status reports that count, not its own wish, so N is
computed as the HPA computes it (upstream's `replica_calculator.go`) from the metrics its status
reports, in pods at the target:

- a per-pod average (Resource, ContainerResource, Pods) or a Value: current / target x the Ready
  pods (upstream multiplies a Value's usage ratio by the Ready pods too). The status is as old as
  the HPA's last sync (15 s) and its metrics (metrics-server's window, 15 to 30 s), so the pods
  counted are those Ready for a minute (`METRIC_LAG_SECONDS`): a replica of ours that just became
  Ready is not in the average yet, and counting it would take the load for more pods than it is.
  Counting too few only errs low, which a scale-down's window absorbs;
- an Object or External AverageValue: current x status.currentReplicas / target (upstream's
  status reports the total over the current replicas, rounded up to a thousandth: a thousandth
  less is taken, so that the rounding never adds a pod).

Spread over N + spares, an average falls as pods are added, so the product stays the load: the
spares do not make the HPA want more. (A Value that does not fall as pods are added would grow
the count without end, ours as upstream's.) As upstream: the highest recommendation of the
metrics, within the HPA's own bounds (the ones it had before ours); none within the tolerance
(0.1) of N; no scale-down while a metric has no current value; a scale-down waits out the
HPA's stabilization window: the recommendation must stay below N for the window, and N then
becomes the highest it was meanwhile (upstream: the highest of the window's last
recommendations, at most the same). Not modelled: the scale-up window and the rate policies
(we add at once: only ever more Ready replicas, sooner), and upstream's counting of loading
pods at 0 % on a scale up (it asks for no more than we do).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from rebalancer.controller.model import PodInfo, ScalerInfo, ScalerMetric, WorkloadInfo
from rebalancer.controller.records import Spare
from rebalancer.controller.snapshot import Snapshot
from rebalancer.strict import moment
from rebalancer.timefmt import iso

TOLERANCE = 0.1  # kube-controller-manager's --horizontal-pod-autoscaler-tolerance
METRIC_LAG_SECONDS = 60.0
WORDED_METRICS = 3  # the words name the first few metrics: they go into an annotation


@dataclass(frozen=True)
class HpaCount:
    """N as the HPA wants it, the stretch below it in progress (`Spare.lower_since`,
    `lower_high`) and the words that say why."""

    base: int
    lower_since: str | None = None
    lower_high: int = 0
    why: str = ""


def scaler_of(snapshot: Snapshot, workload: WorkloadInfo) -> ScalerInfo | None:
    """The HPA that scales this Deployment, if one does (`Snapshot.scaler_by_target`)."""
    return snapshot.scaler_by_target.get(workload.key)


def metered(pods: Iterable[PodInfo], now: datetime) -> int:
    """The Ready pods (not being deleted) the HPA's averages are over by now
    (`METRIC_LAG_SECONDS`)."""
    return sum(
        1
        for p in pods
        if p.ready
        and not p.deleting
        and (p.ready_since is None or (now - p.ready_since).total_seconds() >= METRIC_LAG_SECONDS)
    )


def hpa_count(
    scaler: ScalerInfo, *, ready: int, record: Spare | None, replicas: int, now: datetime
) -> HpaCount:
    """N for a Deployment `scaler` scales, with `ready` Ready replicas, our `record` on it (its
    `base`: the N of the last pass) and `replicas` (its count now: N before any record)."""
    low, high = scaler.own_bounds()
    previous = record.base if record is not None else None
    current = previous if previous is not None else min(max(replicas, low), high)
    loads = [_load(m, ready, scaler.current_replicas) for m in scaler.metrics]
    known = [(m, load) for m, load in zip(scaler.metrics, loads, strict=True) if load is not None]
    who = f"the HPA {scaler.name}"
    if not known:
        return HpaCount(current, why=f"{who}: no metric value, kept at {current}")
    wanted = max(_recommend(load, current) for _, load in known)
    if len(known) < len(loads):
        wanted = max(wanted, current)  # upstream: no scale down on part of the metrics
    wanted = min(max(wanted, low), high)
    said = ", ".join(_words(m, load) for m, load in known[:WORDED_METRICS])
    if previous is None or wanted >= previous:
        return HpaCount(wanted, why=f"{who} wants {wanted} ({said})")
    window = scaler.scale_down_window
    if window is None:
        return HpaCount(previous, why=f"{who} wants {wanted}, never scales down ({said})")
    assert record is not None
    since = record.lower_since or iso(now)
    highest = max(wanted, record.lower_high if record.lower_since else 0)
    waited = (now - moment(since)).total_seconds()
    if waited >= window:
        return HpaCount(highest, why=f"{who} wants {highest} after {window:.0f} s ({said})")
    return HpaCount(
        previous,
        since,
        highest,
        why=f"{who} wants {wanted}, kept at {previous} until it has wanted less for its "
        f"scale-down window, {window:.0f} s, since {since} ({said})",
    )


def _load(metric: ScalerMetric, ready: int, current_replicas: int) -> float | None:
    """The metric's load in pods at its target (see the module's words); None: no value now,
    or no Ready pod to average over (upstream then has no metric either)."""
    if metric.current is None:
        return None
    if metric.per_pod:
        return metric.current / metric.target * ready if ready else None
    return max(0.0, metric.current - 0.001) * max(current_replicas, 1) / metric.target


def _recommend(load: float, current: int) -> int:
    if current > 0 and abs(load / current - 1.0) <= TOLERANCE:
        return current
    return math.ceil(load - 1e-9)  # 2.0000000001 from a float product is 2


def _words(metric: ScalerMetric, load: float) -> str:
    pods = f"{load:.1f}" if abs(load) < 1e6 else f"{load:.3g}"  # a hostile value stays short
    return f"{metric.name} {metric.current:g} of {metric.target:g}: {pods} pods"
