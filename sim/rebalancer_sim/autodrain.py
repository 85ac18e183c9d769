"""AKS node auto-drain: what AKS itself does to a node with a Scheduled Event, as documented.

AKS (node auto-repair's "node auto-drain", on by default and not configurable by the user) acts on
the Scheduled Events of a node's VM: for a `Preempt`, `Redeploy` or `Terminate` it cordons the
node and drains it, best effort, at notice time; it does nothing for `Freeze` and `Reboot`. The
node gets the taint `remediator.aks.microsoft.com/unschedulable:NoSchedule` (the 2023 AKS docs;
shared reference, "AKS node auto-drain"). Its drain goes through the Eviction API, so
PodDisruptionBudgets apply: an eviction a PDB refuses (429) is retried every `retry_seconds`
until the VM goes, as `kubectl drain` retries (any other refusal, such as the 500 for a pod
under two PDBs, is retried the same way). DaemonSet and mirror pods are left, and each pod
keeps its own grace period (kubectl drain's `--grace-period=-1`).

What is not documented and is a choice here: how soon after the event is scheduled AKS starts
(`delay_seconds`, 2 s by default: its node-problem-detector polls Scheduled Events), and what it
does once the event is over. Here: when the event is cancelled or over and the node is Ready, it
removes its taint and uncordons the node if it was the one that cordoned it.

It is a scenario setting (`settings.nodeAutoDrain`, on by default as in AKS); `evictions` and
`blocked` count what it did, `log` says when, for tests and the demo.
"""

from __future__ import annotations

from dataclasses import dataclass

from rebalancer_sim import resources as R
from rebalancer_sim.cloud import Cloud
from rebalancer_sim.disruption import evict
from rebalancer_sim.objects import Obj, is_terminating, pod_phase
from rebalancer_sim.status import ApiError

AUTO_DRAIN_TAINT = "remediator.aks.microsoft.com/unschedulable"
DRAINS_FOR = frozenset({"Preempt", "Redeploy", "Terminate"})
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass
class _Drain:
    node: str
    event_id: str
    cordoned_by_us: bool = False
    next_try: float = 0.0


class NodeAutoDrain:
    def __init__(self, cloud: Cloud, *, delay_seconds: float = 2.0, retry_seconds: float = 5.0):
        self.cloud = cloud
        self.store = cloud.store
        self.delay_seconds = delay_seconds
        self.retry_seconds = retry_seconds
        self._active: dict[tuple[str, str], _Drain] = {}  # (event id, node) -> drain
        self._done: set[str] = set()  # event ids finished with
        self.evictions = 0
        self.blocked = 0  # evictions refused (429 from a PDB, 500 for a pod under two PDBs)
        self.log: list[tuple[float, str]] = []  # (time, what), in order

    def _now(self) -> float:
        return self.store.clock.now().timestamp()

    def reconcile(self) -> int:
        moment = self.store.clock.now()
        now = moment.timestamp()
        worked = 0
        for event in list(self.cloud.imds.events.values()):
            if event.event_type not in DRAINS_FOR or event.event_id in self._done:
                continue
            state = event.state(moment)
            created = (event.created_at or moment).timestamp()
            if state in ("scheduled", "started") and now >= created + self.delay_seconds:
                for vm_name in event.resources:
                    node = self.cloud.node_of_vm(vm_name)
                    if node is not None:
                        worked += self._drain(event.event_id, node, now)
            elif state in ("cancelled", "finished"):
                worked += self._finish(event.event_id)
        return worked

    def _drain(self, event_id: str, node_name: str, now: float) -> int:
        drain = self._active.get((event_id, node_name))
        if drain is None:
            drain = self._active[(event_id, node_name)] = _Drain(node_name, event_id)
        if not self.cloud.node_runs(node_name) or now < drain.next_try:
            return 0
        worked = self._cordon(drain)
        blocked = False
        for pod in self.store.pods_on_node(node_name):
            if is_terminating(pod) or not _drainable(pod):
                continue
            meta = pod["metadata"]
            try:
                evict(self.store, meta["namespace"], meta["name"], {})
            except ApiError as error:
                if error.code == 404:
                    continue
                # 429: a PDB allows no disruption; 500: the pod is under more than one PDB
                # (upstream refuses those). Either way the drain tries again later.
                blocked = True
                self.blocked += 1
                why = "refused by a PDB" if error.code == 429 else f"failed ({error.code})"
                self.log.append((now, f"eviction of {meta['name']} {why}: {error.message}"))
                continue
            self.evictions += 1
            self.log.append((now, f"evicted {meta['namespace']}/{meta['name']}"))
            worked += 1
        # Evicted pods are gone from the drain's list once terminating; a refused one is retried.
        drain.next_try = now + self.retry_seconds if blocked else now
        return worked

    def _cordon(self, drain: _Drain) -> int:
        node = self.store.get(R.NODES, "", drain.node)
        if node is None:
            return 0
        spec = dict(node.get("spec") or {})
        taints = list(spec.get("taints") or [])
        changed = False
        if not spec.get("unschedulable"):
            spec["unschedulable"] = True
            drain.cordoned_by_us = True
            changed = True
        if not any(t.get("key") == AUTO_DRAIN_TAINT for t in taints):
            spec["taints"] = [*taints, {"key": AUTO_DRAIN_TAINT, "effect": "NoSchedule"}]
            changed = True
        if not changed:
            return 0
        self.store.update(R.NODES, dict(node, spec=spec))
        self.log.append((self._now(), f"cordoned {drain.node}"))
        return 1

    def _finish(self, event_id: str) -> int:
        """The event is over or cancelled: take the taint off and undo our cordon, once the node
        is Ready (a node being redeployed stays as it is until it is back)."""
        worked = 0
        pending = False
        for key in [k for k in self._active if k[0] == event_id]:
            drain = self._active[key]
            node = self.store.get(R.NODES, "", drain.node)
            if node is not None and not self.cloud.node_runs(drain.node):
                pending = True
                continue
            del self._active[key]
            if node is None:
                continue
            spec = dict(node.get("spec") or {})
            taints = [t for t in spec.get("taints") or [] if t.get("key") != AUTO_DRAIN_TAINT]
            if taints:
                spec["taints"] = taints
            else:
                spec.pop("taints", None)
            if drain.cordoned_by_us:
                spec.pop("unschedulable", None)
            if spec != node.get("spec"):
                self.store.update(R.NODES, dict(node, spec=spec))
                self.log.append((self._now(), f"uncordoned {drain.node}"))
                worked += 1
        if not pending:
            self._done.add(event_id)
        return worked


def _drainable(pod: Obj) -> bool:
    """What `kubectl drain --ignore-daemonsets` evicts: not DaemonSet or mirror pods, nor pods
    that are done."""
    meta = pod["metadata"]
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return False
    if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
        return False
    return pod_phase(pod) not in ("Succeeded", "Failed")
