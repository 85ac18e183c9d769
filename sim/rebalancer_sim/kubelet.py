"""Kubelets and the node lifecycle controller, for every node at once.

Kubelet: a pod bound to a node whose VM runs becomes Running after `start_seconds`, and Ready
after its startup time (pod annotation `sim.spot-rebalancer.io/startup-seconds`, else the
default): a GPU inference replica that loads a model for minutes is modelled by that number, or
by a range `low..high` from which each pod draws its own (a seeded generator: one scenario, one
seed, the same draws in the same order); a Node with the same annotation is a slow node (an
image pull from far away): its pods take at least that long. A terminating pod disappears
after min(its grace period, its shutdown time: annotation
`sim.spot-rebalancer.io/shutdown-seconds`, else the default), so
`terminationGracePeriodSeconds` bounds a slow shutdown as it does upstream (the kubelet's
SIGKILL), and a second delete with a shorter grace period cuts it. A node whose VM is
gone runs nothing: its pods stay as they are until the node is deleted (then pod GC removes
them). A VM that comes back from a reboot restarts its pods: they load again (`restart_node`).

Node lifecycle controller: the taints upstream derives from node state
(`node.kubernetes.io/unschedulable:NoSchedule` for a cordon, `not-ready`/`unreachable`
NoSchedule+NoExecute from the Ready condition) and marking pods not ready on a node that is not
Ready. NoExecute evictions after tolerationSeconds are not modelled.

Time-based work sits in a heap of (due time, pod key) so a tick only touches what is due.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

from rebalancer_sim import resources as R
from rebalancer_sim.objects import (
    Obj,
    annotation,
    condition_true,
    get_condition,
    is_terminating,
    pod_phase,
    with_condition,
)
from rebalancer_sim.scheduling import toleration_matches
from rebalancer_sim.store import Change, Store, format_time, parse_time

STARTUP_ANNOTATION = "sim.spot-rebalancer.io/startup-seconds"
SHUTDOWN_ANNOTATION = "sim.spot-rebalancer.io/shutdown-seconds"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
PodKey = tuple[str, str]


def _seconds(pod: Obj, key: str, default: float, draw: random.Random | None = None) -> float:
    """An annotation's seconds: a number, or `low..high` drawn uniformly with `draw`."""
    value = annotation(pod, key)
    if value is None:
        return default
    try:
        if ".." in value and draw is not None:
            low, high = (float(part) for part in value.split("..", 1))
            return max(0.0, draw.uniform(low, high))
        return max(0.0, float(value))
    except ValueError:
        return default


class Kubelets:
    def __init__(
        self,
        store: Store,
        *,
        node_runs: Callable[[str], bool],
        start_seconds: float = 0.0,
        startup_seconds: float = 0.0,
        shutdown_seconds: float = 1.0,
        seed: int = 0,
    ) -> None:
        """`node_runs(node_name)`: whether the node's VM is up (the cloud decides)."""
        self.store = store
        self.node_runs = node_runs
        self.start_seconds = start_seconds
        self.startup_seconds = startup_seconds
        self.shutdown_seconds = shutdown_seconds
        self._draw = random.Random(seed)
        # While set, pods start Ready at once: the scenario's workloads as it begins, a cluster
        # that has been serving for a while (`settings.warmStart`).
        self.warm = False
        self._due: list[tuple[float, int, PodKey]] = []
        self._sequence = 0
        store.listeners.append(self._on_change)
        for pod in store.items(R.PODS):
            self._on_change(Change(R.PODS, "ADDED", None, pod, b"", 0))

    def _now(self) -> float:
        return self.store.clock.now().timestamp()

    def _at(self, when: float, key: PodKey) -> None:
        self._sequence += 1
        heapq.heappush(self._due, (when, self._sequence, key))

    def _on_change(self, change: Change) -> None:
        if change.resource is not R.PODS or change.type == "DELETED":
            return
        pod = change.new
        key = (pod["metadata"].get("namespace", ""), pod["metadata"]["name"])
        old = change.old
        deletion = pod["metadata"].get("deletionTimestamp")
        if deletion and (old is None or old["metadata"].get("deletionTimestamp") != deletion):
            # New, or a second delete with a shorter grace period: (re)arm the stop timer.
            meta = pod["metadata"]
            grace = float(meta.get("deletionGracePeriodSeconds") or 0)
            requested_at = parse_time(meta["deletionTimestamp"]).timestamp() - grace
            self._at(
                requested_at
                + min(grace, _seconds(pod, SHUTDOWN_ANNOTATION, self.shutdown_seconds)),
                key,
            )
        elif pod.get("spec", {}).get("nodeName") and pod_phase(pod) == "Pending":
            if old is None or not old.get("spec", {}).get("nodeName"):
                self._at(self._now() + self.start_seconds, key)
        elif (
            pod_phase(pod) == "Running"
            and not condition_true(pod, "Ready")
            and (old is None or pod_phase(old) != "Running")
        ):
            startup = self._startup(pod)
            self._at(self._now() + (0.0 if self.warm else startup), key)

    def _startup(self, pod: Obj) -> float:
        """Running to Ready: the pod's startup time, or its node's when the Node carries the
        same annotation (a slow node: an image pull from far away, a slow disk), whichever is
        longer."""
        own = _seconds(pod, STARTUP_ANNOTATION, self.startup_seconds, self._draw)
        node = self.store.get(R.NODES, "", pod.get("spec", {}).get("nodeName") or "")
        return max(own, _seconds(node, STARTUP_ANNOTATION, 0.0)) if node is not None else own

    def restart_node(self, node_name: str) -> int:
        """The node's VM is back from a reboot: its running pods start over (not Ready, then
        Ready after their startup time again); terminating ones finish now (their containers
        were killed by the reboot)."""
        restarted = 0
        for pod in self.store.pods_on_node(node_name):
            meta = pod["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            if is_terminating(pod):
                self.store.finish_pod_termination(*key)
            elif pod_phase(pod) == "Running":
                status = dict(pod.get("status") or {})
                now = format_time(self.store.clock.now())
                conditions = status.get("conditions")
                for condition_type in ("ContainersReady", "Ready"):
                    conditions = with_condition(
                        conditions, condition_type, "False", now=now, reason="ContainersNotReady"
                    )
                status["conditions"] = conditions
                self.store.update(R.PODS, dict(pod, status=status))
                self._at(self._now() + self._startup(pod), key)
            else:
                continue
            restarted += 1
        return restarted

    def reconcile(self) -> int:
        now = self._now()
        done = 0
        while self._due and self._due[0][0] <= now:
            _, _, key = heapq.heappop(self._due)
            pod = self.store.get(R.PODS, *key)
            if pod is None:
                continue
            node = pod.get("spec", {}).get("nodeName")
            if not node or not self.node_runs(node):
                continue  # nobody runs it: a dead node's pods stay until pod GC
            done += 1
            if is_terminating(pod):
                self.store.finish_pod_termination(*key)
            elif pod_phase(pod) == "Pending":
                self._start(pod)
            elif pod_phase(pod) == "Running" and not condition_true(pod, "Ready"):
                self._ready(pod)
        return done

    def _start(self, pod: Obj) -> None:
        now = format_time(self.store.clock.now())
        status = dict(pod.get("status") or {})
        conditions = status.get("conditions")
        for condition_type, value in (
            ("PodReadyToStartContainers", "True"),
            ("Initialized", "True"),
            ("Ready", "False"),
            ("ContainersReady", "False"),
            ("PodScheduled", "True"),
        ):
            conditions = with_condition(
                conditions,
                condition_type,
                value,
                now=now,
                reason="ContainersNotReady" if value == "False" else "",
            )
        status.update(
            phase="Running",
            conditions=conditions,
            hostIP=_node_ip(self.store, pod["spec"]["nodeName"]),
            podIP=_pod_ip(pod),
            startTime=now,
            containerStatuses=[
                {
                    "name": container["name"],
                    "image": container.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
                for container in pod["spec"].get("containers", [])
            ],
        )
        updated = dict(pod)
        updated["status"] = status
        self.store.update(R.PODS, updated)

    def _ready(self, pod: Obj) -> None:
        now = format_time(self.store.clock.now())
        status = dict(pod.get("status") or {})
        conditions: list[Obj] = status.get("conditions") or []
        for condition_type in ("ContainersReady", "Ready"):
            conditions = with_condition(conditions, condition_type, "True", now=now)
        for condition in conditions:
            if condition["type"] in ("ContainersReady", "Ready"):
                condition.pop("reason", None)
        status["conditions"] = conditions
        status["containerStatuses"] = [
            dict(c, ready=True) for c in status.get("containerStatuses") or []
        ]
        updated = dict(pod)
        updated["status"] = status
        self.store.update(R.PODS, updated)


class NodeLifecycle:
    """Taints from node state, pods marked not ready on a node that is not Ready, and the taint
    manager: pods that do not tolerate a NoExecute taint are deleted, at once or after their
    `tolerationSeconds` (300 s for the default not-ready/unreachable tolerations)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._dirty: dict[str, None] = {}
        self._no_execute: set[str] = set()  # nodes with at least one NoExecute taint
        store.listeners.append(self._on_change)
        for node in store.items(R.NODES):
            self._dirty[node["metadata"]["name"]] = None

    def _on_change(self, change: Change) -> None:
        if change.resource is not R.NODES:
            return
        name = change.new["metadata"]["name"]
        if change.type == "DELETED":
            self._no_execute.discard(name)
            return
        self._dirty[name] = None
        if any(
            t.get("effect") == "NoExecute" for t in change.new.get("spec", {}).get("taints") or []
        ):
            self._no_execute.add(name)
        else:
            self._no_execute.discard(name)

    def reconcile(self) -> int:
        dirty, self._dirty = self._dirty, {}
        for name in dirty:
            node = self.store.get(R.NODES, "", name)
            if node is not None:
                self._sync(node)
        evicted = 0
        for name in list(self._no_execute):
            node = self.store.get(R.NODES, "", name)
            if node is not None:
                evicted += self._evict_untolerating(node)
        return len(dirty) + evicted

    def _evict_untolerating(self, node: Obj) -> int:
        now = self.store.clock.now().timestamp()
        taints = [
            t for t in node.get("spec", {}).get("taints") or [] if t.get("effect") == "NoExecute"
        ]
        evicted = 0
        for pod in self.store.pods_on_node(node["metadata"]["name"]):
            if is_terminating(pod):
                continue
            tolerations = pod.get("spec", {}).get("tolerations") or []
            deadline = 0.0
            for taint in taints:
                matching = [t for t in tolerations if toleration_matches(t, taint)]
                if not matching:
                    deadline = now
                    break
                limits = [t.get("tolerationSeconds") for t in matching]
                if any(limit is None for limit in limits):
                    continue  # tolerated forever
                added = taint.get("timeAdded")
                start = parse_time(added).timestamp() if added else now
                deadline = max(deadline, start + min(float(x) for x in limits if x is not None))
            if deadline and deadline <= now:
                meta = pod["metadata"]
                self.store.delete(R.PODS, meta.get("namespace", ""), meta["name"])
                evicted += 1
        return evicted

    def _sync(self, node: Obj) -> None:
        ready = get_condition(node, "Ready")
        ready_status = (ready or {}).get("status", "Unknown")
        wanted: list[Obj] = []
        if node.get("spec", {}).get("unschedulable"):
            wanted.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
        if ready is None:
            # Never reported: admission's not-ready NoSchedule stays. (Upstream marks it Unknown
            # after a 60 s startup grace period; not modelled.)
            wanted.append({"key": NOT_READY_TAINT, "effect": "NoSchedule"})
        elif ready_status == "False":
            wanted += [{"key": NOT_READY_TAINT, "effect": e} for e in ("NoSchedule", "NoExecute")]
        elif ready_status == "Unknown":
            wanted += [{"key": UNREACHABLE_TAINT, "effect": e} for e in ("NoSchedule", "NoExecute")]
        ours = (UNSCHEDULABLE_TAINT, NOT_READY_TAINT, UNREACHABLE_TAINT)
        taints = list(node.get("spec", {}).get("taints") or [])
        kept = [t for t in taints if t.get("key") not in ours]
        current_ours = [t for t in taints if t.get("key") in ours]
        now = format_time(self.store.clock.now())
        desired_ours = []
        for taint in wanted:
            existing = next(
                (
                    t
                    for t in current_ours
                    if t.get("key") == taint["key"] and t.get("effect") == taint["effect"]
                ),
                None,
            )
            if existing is not None:
                desired_ours.append(existing)
            else:
                desired_ours.append(
                    dict(taint, timeAdded=now) if taint["effect"] == "NoExecute" else taint
                )
        new_taints = kept + desired_ours
        if new_taints != taints:
            updated = dict(node)
            spec = dict(node.get("spec") or {})
            if new_taints:
                spec["taints"] = new_taints
            else:
                spec.pop("taints", None)
            updated["spec"] = spec
            self.store.update(R.NODES, updated)
        if ready_status != "True":
            for pod in self.store.pods_on_node(node["metadata"]["name"]):
                if condition_true(pod, "Ready"):
                    status = dict(pod["status"])
                    status["conditions"] = with_condition(
                        status.get("conditions"), "Ready", "False", now=now
                    )
                    updated_pod = dict(pod)
                    updated_pod["status"] = status
                    self.store.update(R.PODS, updated_pod)


def _node_ip(store: Store, node_name: str) -> str:
    node = store.get(R.NODES, "", node_name)
    for address in (node or {}).get("status", {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address", ""))
    return ""


def _pod_ip(pod: Obj) -> str:
    number = abs(hash(pod["metadata"]["uid"])) % (250 * 250)
    return f"10.244.{number // 250}.{number % 250 + 2}"
